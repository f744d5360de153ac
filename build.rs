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
