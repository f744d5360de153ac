//! Build script: generates the C header, gives the shared object its SONAME, and keeps it
//! loaded after dlclose (`-z nodelete`).
//!
//! The header is generated into `$OUT_DIR/gmp.h`; `tests/header.rs` fails when the
//! committed `include/gmp-sched/gmp.h` differs from it (`scripts/bless-header.sh` updates
//! it).

use std::env;
use std::path::PathBuf;

/// The shared object's SONAME. GNU MP's is `libgmp.so.10`; ours must never equal it.
const SONAME: &str = "libgmp.so.0";

fn main() {
    let crate_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));

    // cbindgen reads the whole crate (any `pub const` ends up in the header unless
    // cbindgen.toml excludes it), so any source change may change the header.
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    println!("cargo:rerun-if-changed=abi/exports.txt");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{SONAME}");
    // Never unloaded (DF_1_NODELETE): once the runtime has started, its threads (sysmon,
    // the Ms, the template thread) run the library's code and its statics hold every G,
    // M and P, so a dlclose that unmapped it would crash them (dlclose_reload.c). Go's
    // c-shared libraries cannot be unloaded either.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");

    // Programs linked against target/<profile>/libgmp.so record the SONAME as
    // DT_NEEDED; give the loader a file of that name beside the library.
    // OUT_DIR is target/<profile>/build/gmp-<hash>/out.
    if let Some(profile_dir) = out_dir.ancestors().nth(3) {
        let link = profile_dir.join(SONAME);
        if std::fs::symlink_metadata(&link).is_err() {
            let _ = std::os::unix::fs::symlink("libgmp.so", &link);
        }
    }

    let mut config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml"))
        .expect("cbindgen.toml must parse");
    // The header's version macros are Cargo.toml's version, so the two never disagree.
    let version = env::var("CARGO_PKG_VERSION").expect("CARGO_PKG_VERSION");
    let part = |name: &str| env::var(name).unwrap_or_else(|e| panic!("{name}: {e}"));
    let version_macros = format!(
        "/* The version of gmp-sched this header belongs to; gmp_sched_version() gives the\n   \
         library's. */\n\
         #define GMP_SCHED_VERSION_MAJOR {}\n\
         #define GMP_SCHED_VERSION_MINOR {}\n\
         #define GMP_SCHED_VERSION_PATCH {}\n\
         #define GMP_SCHED_VERSION \"{version}\"\n",
        part("CARGO_PKG_VERSION_MAJOR"),
        part("CARGO_PKG_VERSION_MINOR"),
        part("CARGO_PKG_VERSION_PATCH"),
    );
    config.after_includes = Some(version_macros + config.after_includes.as_deref().unwrap_or(""));
    // The interposed libc names and the dump-named symbols are exported but are not the
    // header's: abi/exports.txt lists them once for this, the tests and the docs.
    config
        .export
        .exclude
        .extend(abi_names(&crate_dir, &["interposed", "dump"]));
    match cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
    {
        Ok(bindings) => {
            bindings.write_to_file(out_dir.join("gmp.h"));
        }
        Err(e) => panic!("cbindgen failed: {e}"),
    }
    version_scripts(&crate_dir, &out_dir);
}

/// Writes libgmp.so's two version scripts and names them to scripts/link-cc, the linker
/// this tree's `.cargo/config.toml` sets, through `GMP_SCHED_VERSION_SCRIPTS` (rustc runs
/// the linker in its own environment):
///
/// - `libgmp.map`: the library's own symbols (gmp.h's functions and abi/exports.txt's
///   `[dump]`, `[compat]` and `[customlabels]` names) in versioned nodes. A name keeps the node of the
///   release that first exported it (`abi/GMP_SCHED_<major>.<minor>.txt` freezes each
///   released node); a name in none of them joins the node of this version.
/// - `libgmp-libc.map`: the interposed libc names, unversioned (the base version), so that
///   a program's references to `read@GLIBC_2.2.5` bind to them under LD_PRELOAD; and
///   every other symbol local.
fn version_scripts(crate_dir: &std::path::Path, out_dir: &std::path::Path) {
    let header = std::fs::read_to_string(out_dir.join("gmp.h")).expect("generated gmp.h");
    let mut own: Vec<String> = header_functions(&header);
    own.extend(abi_names(crate_dir, &["dump", "compat", "customlabels"]));

    let abi = crate_dir.join("abi");
    println!("cargo:rerun-if-changed={}", abi.display());
    let mut frozen: Vec<((u32, u32), Vec<String>)> = Vec::new();
    for entry in std::fs::read_dir(&abi).expect("abi/") {
        let path = entry.expect("abi/ entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let Some(version) = name
            .strip_prefix("GMP_SCHED_")
            .and_then(|n| n.strip_suffix(".txt"))
        else {
            continue;
        };
        let parse = |v: &str| -> (u32, u32) {
            let (major, minor) = v
                .split_once('.')
                .unwrap_or_else(|| panic!("abi/{name}: no minor"));
            (major.parse().expect("major"), minor.parse().expect("minor"))
        };
        let text = std::fs::read_to_string(&path).expect("frozen node");
        let names = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(str::to_string)
            .collect();
        frozen.push((parse(version), names));
    }
    frozen.sort();
    let current: (u32, u32) = (
        env::var("CARGO_PKG_VERSION_MAJOR")
            .expect("major")
            .parse()
            .expect("major"),
        env::var("CARGO_PKG_VERSION_MINOR")
            .expect("minor")
            .parse()
            .expect("minor"),
    );
    let in_frozen = |n: &String| frozen.iter().any(|(_, names)| names.contains(n));
    let new: Vec<String> = own.iter().filter(|n| !in_frozen(n)).cloned().collect();
    match frozen.iter_mut().find(|(v, _)| *v == current) {
        Some((_, names)) => names.extend(new),
        None => frozen.push((current, new)),
    }

    let node = |(major, minor): (u32, u32)| format!("GMP_SCHED_{major}.{minor}");
    let mut map =
        String::from("/* Generated by build.rs: libgmp.so's own symbols, by release. */\n");
    let mut previous = None;
    for (version, names) in &frozen {
        // A name the library no longer exports stays out: removing one is a breaking
        // change, which tests/exports.rs reports (and a new SONAME would start afresh).
        let names: Vec<&String> = names.iter().filter(|n| own.contains(n)).collect();
        map.push_str(&format!("{} {{\n  global:\n", node(*version)));
        for n in names {
            map.push_str(&format!("    \"{n}\";\n"));
        }
        match previous {
            Some(p) => map.push_str(&format!("}} {p};\n")),
            None => map.push_str("};\n"),
        }
        previous = Some(node(*version));
    }
    let mut libc = String::from(
        "/* Generated by build.rs: the interposed libc names, unversioned; nothing else. */\n{\n  global:\n",
    );
    for n in abi_names(crate_dir, &["interposed"]) {
        libc.push_str(&format!("    {n};\n"));
    }
    libc.push_str("  local:\n    *;\n};\n");
    let own_map = out_dir.join("libgmp.map");
    let libc_map = out_dir.join("libgmp-libc.map");
    std::fs::write(&own_map, map).expect("write libgmp.map");
    std::fs::write(&libc_map, libc).expect("write libgmp-libc.map");
    println!(
        "cargo:rustc-env=GMP_SCHED_VERSION_SCRIPTS={}:{}",
        own_map.display(),
        libc_map.display()
    );
}

/// The functions a generated gmp.h declares: its one-line prototypes at file scope
/// (cbindgen writes each on one line; the inline fast paths are definitions).
fn header_functions(header: &str) -> Vec<String> {
    header
        .lines()
        .filter(|l| {
            !l.starts_with(|c: char| c.is_whitespace() || c == '#' || c == '/' || c == '*')
                && !l.starts_with("typedef")
                && l.trim_end().ends_with(");")
        })
        .filter_map(|l| {
            let name = l[..l.find('(')?]
                .rsplit(|c: char| !(c.is_alphanumeric() || c == '_'))
                .next()?;
            Some(name.to_string())
        })
        .collect()
}

/// The names of `sections` in abi/exports.txt (one name a line, `[section]` headings, `#`
/// comments).
fn abi_names(crate_dir: &std::path::Path, sections: &[&str]) -> Vec<String> {
    let path = crate_dir.join("abi/exports.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut section = String::new();
    let mut names = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_string();
        } else if sections.contains(&section.as_str()) {
            names.push(line.to_string());
        }
    }
    names
}
