//! What `libgmp.so` exports, and that it can live beside GNU MP (`libgmp.so.10`).
//!
//! The ABI: exactly the functions include/gmp-sched/gmp.h declares, plus the names
//! abi/exports.txt lists (the interposed libc functions, the dump-named slow halves of the
//! channel entries, the compatibility symbols); the SONAME is libgmp.so.0.
//!
//! The library checked is the one `cargo test` built: `deps/libgmp.so` beside this test
//! executable (cargo copies it up to `target/<profile>/` only on `cargo build`), else
//! `target/<profile>/libgmp.so`. Uses binutils' `nm` and `readelf`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

mod common;
use common::library;

/// GNU MP's libgmp.so.10, present wherever gcc is installed on Debian.
const GNU_MP: &str = "/usr/lib/x86_64-linux-gnu/libgmp.so.10";

/// Our SONAME (build.rs); GNU MP's is `libgmp.so.10`.
const SONAME: &str = "libgmp.so.0";

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The sections of abi/exports.txt, the names the library exports besides the header's
/// functions: `interposed` (libc's blocking functions, under their own names), `dump`
/// (symbols exported only to be named in dumps), `compat` (functions an older header
/// declared) and `customlabels` (the custom-labels ABI's data symbols), each with its
/// names in order.
fn abi_list() -> BTreeMap<String, Vec<String>> {
    let path = manifest_dir().join("abi/exports.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut sections: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut section = None;
    for (i, line) in text.lines().map(str::trim).enumerate() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = Some(name.to_string());
            sections.entry(name.to_string()).or_default();
        } else {
            let s = section.as_ref().unwrap_or_else(|| {
                panic!("abi/exports.txt:{}: a name before any [section]", i + 1)
            });
            sections.get_mut(s).expect("section").push(line.to_string());
        }
    }
    sections
}

fn section(list: &BTreeMap<String, Vec<String>>, name: &str) -> Vec<String> {
    list.get(name).cloned().unwrap_or_default()
}

/// The functions include/gmp-sched/gmp.h declares: its one-line prototypes at file scope
/// (cbindgen writes each on one line; the inline fast paths are definitions, not exported).
fn header_functions() -> BTreeSet<String> {
    let path = manifest_dir().join("include/gmp-sched/gmp.h");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
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

/// GNU MP's public `gmp_*` names (functions, variables and the macros that rename them
/// to `__gmp_*`), from its manual's function index. Our `gmp_*` names must avoid them all:
/// a program may include both headers or link both libraries.
const GNU_MP_NAMES: &[&str] = &[
    "gmp_version",
    "gmp_errno",
    "gmp_bits_per_limb",
    "gmp_randinit",
    "gmp_randinit_default",
    "gmp_randinit_lc_2exp",
    "gmp_randinit_lc_2exp_size",
    "gmp_randinit_mt",
    "gmp_randinit_set",
    "gmp_randseed",
    "gmp_randseed_ui",
    "gmp_randclear",
    "gmp_urandomb_ui",
    "gmp_urandomm_ui",
    "gmp_printf",
    "gmp_fprintf",
    "gmp_sprintf",
    "gmp_snprintf",
    "gmp_asprintf",
    "gmp_obstack_printf",
    "gmp_vprintf",
    "gmp_vfprintf",
    "gmp_vsprintf",
    "gmp_vsnprintf",
    "gmp_vasprintf",
    "gmp_obstack_vprintf",
    "gmp_printf_funs",
    "gmp_scanf",
    "gmp_fscanf",
    "gmp_sscanf",
    "gmp_vscanf",
    "gmp_vfscanf",
    "gmp_vsscanf",
    "gmp_set_memory_functions",
    "gmp_get_memory_functions",
    "gmp_randstate_t",
    "gmp_randstate_ptr",
    "gmp_randstate_srcptr",
    "gmp_randalg_t",
];

fn tool(program: &str, args: &[&str], file: &Path) -> String {
    let out = Command::new(program)
        .args(args)
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e} (binutils installed?)"));
    assert!(
        out.status.success(),
        "{program} {args:?} {} failed: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// `(type letter, name)` of every defined dynamic symbol (`nm -D --defined-only`), with
/// any `@VERSION` suffix removed.
fn dynamic_symbols(lib: &Path) -> Vec<(char, String)> {
    tool("nm", &["-D", "--defined-only"], lib)
        .lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace().rev();
            let name = f.next()?;
            let kind = f.next()?.chars().next()?;
            Some((kind, name.split('@').next().unwrap_or(name).to_string()))
        })
        .collect()
}

/// Exported code and data (nm types T, W, D, B, R, V, i; lowercase is local).
fn exported(lib: &Path) -> BTreeSet<String> {
    dynamic_symbols(lib)
        .into_iter()
        .filter(|(kind, _)| matches!(kind, 'T' | 'W' | 'D' | 'B' | 'R' | 'V' | 'i'))
        .map(|(_, name)| name)
        .collect()
}

/// The ABI: the library exports exactly the functions gmp.h declares plus the names
/// abi/exports.txt lists, nothing more and nothing less.
#[test]
fn exports_are_the_header_and_the_abi_list() {
    let lib = library();
    let exported = exported(&lib);
    let header = header_functions();
    assert!(
        header.contains("gmp_go"),
        "no prototypes found in gmp.h: {header:?}"
    );
    let listed: BTreeSet<String> = abi_list().into_values().flatten().collect();
    let promised: BTreeSet<String> = header.union(&listed).cloned().collect();
    let missing: Vec<&String> = promised.difference(&exported).collect();
    let extra: Vec<&String> = exported.difference(&promised).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{}: not exported though gmp.h declares them or abi/exports.txt lists them: \
         {missing:?}; exported though neither does: {extra:?}",
        lib.display()
    );
}

/// abi/exports.txt's sections hold what their names say, and no name twice or in the
/// header as well.
#[test]
fn abi_list_is_well_formed() {
    let list = abi_list();
    let known = ["interposed", "dump", "compat", "customlabels"];
    for name in list.keys() {
        assert!(
            known.contains(&name.as_str()),
            "abi/exports.txt: unknown section [{name}]"
        );
    }
    let interposed = section(&list, "interposed");
    assert!(interposed.contains(&"read".to_string()), "{interposed:?}");
    for n in &interposed {
        assert!(
            !n.starts_with("gmp_"),
            "[interposed] {n} is not a libc name"
        );
    }
    for n in section(&list, "dump") {
        assert!(
            n.starts_with("gmp_") && n.contains('.'),
            "[dump] {n}: C could spell it"
        );
    }
    for n in section(&list, "customlabels") {
        assert!(
            n.starts_with("custom_labels_"),
            "[customlabels] {n} is not a name of the custom-labels ABI"
        );
    }
    let header = header_functions();
    for n in section(&list, "compat") {
        assert!(n.starts_with("gmp_"), "[compat] {n} lacks the gmp_ prefix");
        assert!(
            !header.contains(&n),
            "[compat] {n} is declared in gmp.h: not a compat name"
        );
    }
    let all: Vec<String> = list.into_values().flatten().collect();
    let unique: BTreeSet<&String> = all.iter().collect();
    assert_eq!(
        unique.len(),
        all.len(),
        "abi/exports.txt lists a name twice"
    );
}

#[test]
fn api_functions_exported() {
    // The functions notes/api.md promises for the runtime core.
    let names = exported(&library());
    for f in [
        "gmp_sched_version",
        "gmp_go",
        "gmp_go_attr",
        "gmp_yield",
        "gmp_goexit",
        "gmp_goid",
        "gmp_maxprocs",
        "gmp_num_goroutine",
        "gmp_num_cpu",
        "gmp_set_default_stack_size",
        "gmp_set_max_threads",
        "gmp_wg_add",
        "gmp_wg_done",
        "gmp_wg_wait",
        "gmp_stats",
    ] {
        assert!(names.contains(f), "{f} is not exported");
    }
}

#[test]
fn soname_is_not_gnu_mp() {
    let lib = library();
    let dynamic = tool("readelf", &["-d", "-W"], &lib);
    let sonames: Vec<&str> = dynamic
        .lines()
        .filter(|l| l.contains("(SONAME)"))
        .filter_map(|l| l.split('[').nth(1)?.split(']').next())
        .collect();
    // The built file's SONAME, not our constant, is what must differ from GNU MP's.
    assert!(
        !sonames.contains(&"libgmp.so.10"),
        "{} claims GNU MP's SONAME:\n{dynamic}",
        lib.display()
    );
    assert_eq!(sonames, [SONAME], "SONAME of {}:\n{dynamic}", lib.display());
}

#[test]
fn soname_symlink_beside_library() {
    // build.rs puts target/<profile>/libgmp.so.0 -> libgmp.so for programs linked
    // against target/<profile>/libgmp.so.
    let exe = std::env::current_exe().expect("current_exe");
    let profile = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>");
    let link = profile.join(SONAME);
    let target = std::fs::read_link(&link)
        .unwrap_or_else(|e| panic!("{} is not a symlink: {e}", link.display()));
    assert_eq!(target, Path::new("libgmp.so"));
}

#[test]
fn no_gnu_mp_name_clash() {
    let ours = exported(&library());
    let mut theirs: BTreeSet<String> = GNU_MP_NAMES.iter().map(|s| s.to_string()).collect();
    if Path::new(GNU_MP).exists() {
        for (_, name) in dynamic_symbols(Path::new(GNU_MP)) {
            // GNU MP's header renames its public gmp_x to the exported __gmp_x.
            if let Some(public) = name.strip_prefix("__") {
                theirs.insert(public.to_string());
            }
            theirs.insert(name);
        }
    }
    let clash: Vec<&String> = ours.intersection(&theirs).collect();
    assert!(clash.is_empty(), "names shared with GNU MP: {clash:?}");
}

#[test]
fn gnu_mp_name_list_is_real() {
    // Keeps the hard-coded list honest where GNU MP is installed: its exported
    // functions are those names with the __ prefix its header adds.
    if !Path::new(GNU_MP).exists() {
        eprintln!("{GNU_MP} not installed: skipped");
        return;
    }
    let theirs: BTreeSet<String> = dynamic_symbols(Path::new(GNU_MP))
        .into_iter()
        .map(|(_, n)| n)
        .collect();
    for name in [
        "gmp_version",
        "gmp_errno",
        "gmp_printf",
        "gmp_randinit_mt",
        "gmp_urandomb_ui",
    ] {
        assert!(
            theirs.contains(&format!("__{name}")),
            "{GNU_MP} lacks __{name}"
        );
    }
}

/// The library's own code never calls a libc function it also exports (the hook): it
/// calls libc's through `crate::sys::real` (src/sys/real.rs), so that the runtime never
/// re-enters the interposer (a diagnostic written from inside the `write` hook would
/// recurse; netpoll's own `fcntl` would be recorded as the user's O_NONBLOCK).
#[test]
fn runtime_calls_libc_through_sys_real() {
    fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).expect("read_dir src") {
            let p = e.expect("dir entry").path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let interposed = section(&abi_list(), "interposed");
    let mut files = Vec::new();
    walk(&manifest_dir().join("src"), &mut files);
    let mut bad = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("read source");
        for (i, line) in text.lines().enumerate() {
            for name in &interposed {
                if line.contains(&format!("libc::{name}(")) {
                    bad.push(format!("{}:{}: libc::{name}", f.display(), i + 1));
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "use crate::sys::real instead:\n{}",
        bad.join("\n")
    );
}

/// `(name, version)` of every defined dynamic symbol (`readelf --dyn-syms`), the version
/// empty for an unversioned one.
fn symbol_versions(lib: &Path) -> BTreeMap<String, String> {
    tool("readelf", &["--dyn-syms", "-W"], lib)
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // Num: Value Size Type Bind Vis Ndx Name
            if f.len() < 8 || f[6] == "UND" || !f[0].ends_with(':') {
                return None;
            }
            let (name, version) = match f[7].split_once('@') {
                Some((n, v)) => (n, v.trim_start_matches('@')),
                None => (f[7], ""),
            };
            Some((name.to_string(), version.to_string()))
        })
        .collect()
}

/// The frozen version nodes: `abi/GMP_SCHED_<x.y>.txt` → (node name, its names).
fn frozen_nodes() -> Vec<(String, Vec<String>)> {
    let mut nodes = Vec::new();
    for entry in std::fs::read_dir(manifest_dir().join("abi")).expect("abi/") {
        let path = entry.expect("abi/ entry").path();
        let file = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("")
            .to_string();
        let Some(node) = file
            .strip_suffix(".txt")
            .filter(|n| n.starts_with("GMP_SCHED_"))
        else {
            continue;
        };
        let text = std::fs::read_to_string(&path).expect("frozen node");
        let names = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(str::to_string)
            .collect();
        nodes.push((node.to_string(), names));
    }
    nodes
}

/// Symbol versions (HACKING.md, "The ABI"): the library's own names carry the node of the
/// release that first exported them, and keep it; the interposed libc names carry none,
/// so that a program's `read@GLIBC_2.2.5` binds to ours under LD_PRELOAD.
#[test]
fn own_symbols_are_versioned_and_libc_names_are_not() {
    let lib = library();
    let versions = symbol_versions(&lib);
    let list = abi_list();
    for n in section(&list, "interposed") {
        assert_eq!(
            versions.get(&n).map(String::as_str),
            Some(""),
            "{}: interposed {n} must be exported unversioned",
            lib.display()
        );
    }
    let mut own: BTreeSet<String> = header_functions();
    own.extend(section(&list, "dump"));
    own.extend(section(&list, "compat"));
    for n in &own {
        let v = versions
            .get(n)
            .map(String::as_str)
            .unwrap_or("(not exported)");
        assert!(
            v.starts_with("GMP_SCHED_"),
            "{}: {n} has version {v:?}, not a GMP_SCHED_ node (was libgmp.so linked by \
             scripts/link-cc with lld? see .cargo/config.toml)",
            lib.display()
        );
    }
    let frozen = frozen_nodes();
    assert!(
        frozen.iter().any(|(node, _)| node == "GMP_SCHED_0.2"),
        "abi/GMP_SCHED_0.2.txt is missing"
    );
    for (node, names) in &frozen {
        for n in names {
            assert_eq!(
                versions.get(n),
                Some(node),
                "{n} was exported as {node}: removing it or moving it to another node \
                 breaks programs linked against libgmp.so.0 (a new SONAME is the only way)"
            );
        }
    }
}

/// A C program linked against the library records the version it needs, so that the
/// loader refuses an older libgmp.so.0 that lacks it instead of failing at the first call.
#[test]
fn linked_programs_need_the_version_node() {
    let lib = library();
    let dir = std::env::temp_dir().join(format!("gmp-exports-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let src = dir.join("main.c");
    let exe = dir.join("main");
    std::fs::write(
        &src,
        "#include <gmp-sched/gmp.h>\nint main(void) { return gmp_num_goroutine() < 0; }\n",
    )
    .expect("write main.c");
    let include = manifest_dir().join("include");
    let out = Command::new("cc")
        .arg(&src)
        .arg(format!("-I{}", include.display()))
        .arg(format!("-L{}", lib.parent().expect("lib dir").display()))
        .args(["-lgmp", "-o"])
        .arg(&exe)
        .output()
        .expect("cc");
    assert!(
        out.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let needs = tool("readelf", &["-V", "-W"], &exe);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        needs.contains("Name: GMP_SCHED_0.2") && needs.contains("File: libgmp.so.0"),
        "the program does not need GMP_SCHED_0.2 from libgmp.so.0:\n{needs}"
    );
}
