//! The crate's layers point down only (HACKING.md, "The layers"): a module of one floor
//! may name its own floor's modules that come after it in [`FLOORS`] and any module of a
//! lower floor, never one above. Read from the source: every `crate::…` path outside test
//! code (a `#[cfg(test)]` or loom module, `tests.rs`, `*_loom.rs`) counts, `use` or not.
//!
//! Inside `rt/` the same rule holds over [`RT_FLOORS`], for paths (`park::gopark`,
//! `super::park`) and for the names `rt/mod.rs` re-exports, which the files see through
//! `use super::*` (a bare `gopark` names park.rs): no file of `rt/` reaches up, so none
//! circles with another.

use std::path::{Path, PathBuf};

/// The crate's top-level modules, top floor first. Within a floor, a module may name
/// those after it in the same list (`interpose` may use `ffi`'s panic boundary, `chan`
/// may use `sync`, `stack` may use `arch`).
const FLOORS: &[&[&str]] = &[
    &["interpose", "ffi"],
    &["net", "poll", "signal"],
    &["chan", "sync"],
    &["rt"],
    &["stack", "arch"],
    &["sys"],
    &["loom"],
];

/// The files of `src/rt/`, top floor first (HACKING.md, "The layers", draws them): start-up;
/// the read-only debug wing; the loops; syscalls, preemption and the other ways a
/// goroutine leaves its M; the waiting mechanisms; the idle lists and the submit path; the
/// core types and what every file uses.
const RT_FLOORS: &[&[&str]] = &[
    &["schedinit"],
    &["sysmon"],
    &[
        "schedtrace",
        "metrics",
        "checkdead",
        "trace",
        "cpuprof",
        "leaks",
        "dump",
    ],
    &[
        "mstart",
        "schedule",
        "lockedm",
        "procresize",
        "foreign",
        "spinning",
        "steal",
    ],
    &[
        "lockosthread",
        "preempt",
        "unseen",
        "offload",
        "scopecall",
        "preemptsig",
        "proc",
        "syscall",
        "stopm",
    ],
    &["netpoll", "timer", "scope", "park"],
    &["ready", "affinity", "newm", "idle"],
    &[
        "mod",
        "runq",
        "sudog",
        "timerheap",
        "config",
        "os_linux",
        "hooks",
        "asan",
        "tsan",
        "schedlat",
        "stackhwm",
        "hookflags",
        "threads",
        "foreignwait",
        "sysmonwake",
        "epoll",
        "sigpreempt",
        "taskfile",
        "coarsetime",
        "traceevent",
        "sigprof",
        "profbuf",
        "labels",
        "customlabels",
    ],
];

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Whether a file holds only test code.
fn test_file(p: &Path) -> bool {
    let name = p.file_name().unwrap().to_str().unwrap();
    name == "tests.rs" || name.ends_with("_loom.rs")
}

/// The file's lines that are not test code or comments: a `mod` item under a
/// `#[cfg(...test...)]` attribute is skipped to its closing brace (test modules are
/// items of their file, closed by a `}` in column 0 or at their own indentation).
fn code_lines(text: &str) -> Vec<(usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i].trim_start();
        if l.starts_with("#[cfg(") && l.contains("test") {
            let mut j = i + 1;
            while j < lines.len() && lines[j].trim_start().starts_with("#[") {
                j += 1;
            }
            if j < lines.len() {
                let item = lines[j].trim_start();
                let indent = lines[j].len() - item.len();
                if item.starts_with("mod ") || item.starts_with("pub(crate) mod ") {
                    if item.ends_with(';') {
                        i = j + 1;
                        continue;
                    }
                    let close = format!("{}}}", " ".repeat(indent));
                    let mut k = j + 1;
                    while k < lines.len() && lines[k] != close {
                        k += 1;
                    }
                    i = k + 1;
                    continue;
                }
            }
        }
        let code = match l.find("//") {
            Some(c) => &l[..c],
            None => l,
        };
        if !code.trim().is_empty() {
            out.push((i + 1, code.to_string()));
        }
        i += 1;
    }
    out
}

/// The top-level modules a line of code names through `crate::`.
fn named_modules(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().last();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for part in group[..end].split(',') {
                let name = ident(part.trim());
                if !name.is_empty() {
                    out.push(name);
                }
            }
        } else {
            let name = ident(rest);
            out.push(name);
        }
    }
    out
}

/// The identifier `s` starts with (empty if none).
fn ident(s: &str) -> String {
    s.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// (floor, position within the floor) of a top-level module.
fn rank(module: &str) -> Option<(usize, usize)> {
    FLOORS
        .iter()
        .enumerate()
        .find_map(|(f, mods)| mods.iter().position(|m| *m == module).map(|i| (f, i)))
}

#[test]
fn every_module_has_a_floor() {
    let mut missing = Vec::new();
    for e in std::fs::read_dir(src_dir()).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_stem().unwrap().to_str().unwrap().to_string();
        if name != "lib" && rank(&name).is_none() {
            missing.push(name);
        }
    }
    assert!(
        missing.is_empty(),
        "modules missing from FLOORS: {missing:?}"
    );
}

#[test]
fn layers_point_down() {
    let src = src_dir();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut bad = Vec::new();
    for p in &files {
        let rel = p.strip_prefix(&src).unwrap();
        let top = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_str()
            .unwrap();
        let top = top.trim_end_matches(".rs");
        if top == "lib" || test_file(p) {
            continue;
        }
        let (floor, pos) = rank(top).unwrap_or_else(|| panic!("{top}: not in FLOORS"));
        let text = std::fs::read_to_string(p).unwrap();
        for (n, line) in code_lines(&text) {
            for m in named_modules(&line) {
                if m == top || m == "self" || m == "super" {
                    continue;
                }
                let Some((f, i)) = rank(&m) else {
                    continue;
                };
                if f < floor || (f == floor && i < pos) {
                    bad.push(format!(
                        "src/{}:{n}: {top} names {m}: {}",
                        rel.display(),
                        line.trim()
                    ));
                }
            }
        }
    }
    assert!(bad.is_empty(), "upward references:\n{}", bad.join("\n"));
}

/// The sibling files (of `rt/`, or of another module directory) a line of code names:
/// `x::…` where `x` is one of them (the files bring each other's names into scope with
/// `use super::*`), `super::x`, `crate::rt::x`.
fn named_siblings(line: &str, modules: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for m in modules {
        let mut found = false;
        for pat in [format!("super::{m}"), format!("crate::rt::{m}")] {
            if let Some(at) = line.find(&pat) {
                let after = line[at + pat.len()..].chars().next();
                found |= !after.is_some_and(|c| c.is_alphanumeric() || c == '_');
            }
        }
        let pat = format!("{m}::");
        let mut from = 0;
        while let Some(at) = line[from..].find(&pat) {
            let at = from + at;
            let before = line[..at].chars().last();
            found |= !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':');
            from = at + pat.len();
        }
        if found {
            out.push(m.clone());
        }
    }
    out
}

/// The names `rt/mod.rs` re-exports from its files (`pub use park::{gopark, …};`, also
/// `pub(crate) use`), with
/// the file each comes from: the other files see them through `use super::*`, so a use
/// of one names that file as surely as a path does.
fn reexports(mod_rs: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = mod_rs;
    let next = |r: &str| {
        [r.find("\npub use "), r.find("\npub(crate) use ")]
            .into_iter()
            .flatten()
            .min()
    };
    while let Some(at) = next(rest) {
        rest = &rest[at + 1..];
        rest = &rest[rest.find(" use ").unwrap() + " use ".len()..];
        let stmt = &rest[..rest.find(';').unwrap()];
        let Some((module, names)) = stmt.split_once("::") else {
            continue;
        };
        if module == "crate" {
            continue;
        }
        let names = names.trim().trim_start_matches('{').trim_end_matches('}');
        for n in names.split(',') {
            let n = n.trim();
            if !n.is_empty() {
                out.push((n.to_string(), module.to_string()));
            }
        }
    }
    out
}

/// The items a file defines at any depth (`fn x`, `struct x`, …): its own `init` is not
/// rt's.
fn defined_names(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for kw in [
        "fn ", "struct ", "enum ", "static ", "const ", "type ", "trait ",
    ] {
        let mut rest = text;
        while let Some(at) = rest.find(kw) {
            let before = rest[..at].chars().last();
            rest = &rest[at + kw.len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let name = ident(rest);
            out.push(name);
        }
    }
    out
}

/// Whether a line of code uses `name` as rt's re-export: bare (`gopark(`), or as
/// `super::name` / `rt::name`; not as another path's item (`epoll::init`), a field or
/// method (`.init`), or a definition (`fn init`).
fn uses_name(line: &str, name: &str) -> bool {
    // Outside string literals.
    let line: String = line
        .split('"')
        .enumerate()
        .map(|(i, part)| if i % 2 == 0 { part } else { "" })
        .collect::<Vec<_>>()
        .join("\"\"");
    let line = line.as_str();
    let mut from = 0;
    while let Some(at) = line[from..].find(name) {
        let at = from + at;
        from = at + name.len();
        let before = &line[..at];
        let rest = &line[at + name.len()..];
        let after = rest.chars().next();
        // A field (`gomaxprocs: i32`, `gomaxprocs: x` in a struct literal).
        let field = rest.starts_with(':') && !rest.starts_with("::");
        if field
            || after.is_some_and(|c| c.is_alphanumeric() || c == '_')
            || before
                .chars()
                .last()
                .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.')
            || before.ends_with("fn ")
        {
            continue;
        }
        if let Some(path) = before.strip_suffix("::") {
            if !(path.ends_with("super") || path.ends_with("rt")) {
                continue;
            }
        }
        return true;
    }
    false
}

/// The files (and subdirectories) of module directory `dir` other than `mod.rs` and test
/// files, by name without `.rs`, sorted.
fn module_files(dir: &Path) -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir() || !test_file(p))
        .map(|p| p.file_stem().unwrap().to_str().unwrap().to_string())
        .filter(|n| n != "mod")
        .collect();
    files.sort();
    files.dedup();
    files
}

/// `code_lines` of a module's `file`, less `mod.rs`'s module declarations and re-exports
/// (the module's public face names no dependency), multi-line ones included.
fn dependency_lines(file: &str, text: &str) -> Vec<(usize, String)> {
    let mut in_reexport = false;
    code_lines(text)
        .into_iter()
        .filter(|(_, line)| {
            let t = line.trim_start();
            let reexport = t.starts_with("pub use ") || t.starts_with("pub(crate) use ");
            if file == "mod" && (in_reexport || reexport || t.contains("mod ")) {
                in_reexport = (in_reexport || reexport) && !t.ends_with(';');
                return false;
            }
            true
        })
        .collect()
}

fn rt_rank(m: &str) -> (usize, usize) {
    RT_FLOORS
        .iter()
        .enumerate()
        .find_map(|(f, mods)| mods.iter().position(|x| *x == m).map(|i| (f, i)))
        .unwrap_or_else(|| panic!("src/rt/{m}: not in RT_FLOORS"))
}

#[test]
fn rt_floors_point_down() {
    let rt = src_dir().join("rt");
    let modules = module_files(&rt);
    let reexports = reexports(&std::fs::read_to_string(rt.join("mod.rs")).unwrap());
    let mut bad = Vec::new();
    for file in modules.iter().cloned().chain(["mod".to_string()]) {
        let (floor, pos) = rt_rank(&file);
        let text = std::fs::read_to_string(rt.join(format!("{file}.rs"))).unwrap();
        let own = defined_names(&text);
        for (n, line) in dependency_lines(&file, &text) {
            let through_reexports = reexports
                .iter()
                .filter(|(name, m)| *m != file && !own.contains(name) && uses_name(&line, name))
                .map(|(_, m)| m.clone());
            let mut named = named_siblings(&line, &modules);
            named.extend(through_reexports);
            named.sort();
            named.dedup();
            for m in named {
                if m == file {
                    continue;
                }
                let (f, i) = rt_rank(&m);
                if f < floor || (f == floor && i < pos) {
                    bad.push(format!(
                        "src/rt/{file}.rs:{n}: {file} names {m}: {}",
                        line.trim()
                    ));
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "upward references in rt/:\n{}",
        bad.join("\n")
    );
}

/// The files of each module directory other than `rt/` (which has floors) name each
/// other without a circle: `chan/hchan.rs` may use `chan/waitq.rs` or the reverse, never
/// both, through any chain. `mod.rs` counts by its code, not its declarations and
/// re-exports.
#[test]
fn no_module_has_files_in_a_circle() {
    let src = src_dir();
    let mut circles = Vec::new();
    for e in std::fs::read_dir(&src).unwrap() {
        let dir = e.unwrap().path();
        let top = dir.file_name().unwrap().to_str().unwrap().to_string();
        if !dir.is_dir() || top == "rt" {
            continue;
        }
        let files = module_files(&dir);
        let mut edges: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for file in files.iter().cloned().chain(["mod".to_string()]) {
            let Ok(text) = std::fs::read_to_string(dir.join(format!("{file}.rs"))) else {
                continue;
            };
            let mut named = Vec::new();
            for (_, line) in dependency_lines(&file, &text) {
                let line = line.replace(&format!("crate::{top}::"), "super::");
                named.extend(
                    named_siblings(&line, &files)
                        .into_iter()
                        .filter(|m| *m != file),
                );
            }
            named.sort();
            named.dedup();
            edges.insert(file, named);
        }
        // A depth-first search from every file: a file met again on the path closes a
        // circle.
        fn visit(
            f: &str,
            edges: &std::collections::BTreeMap<String, Vec<String>>,
            path: &mut Vec<String>,
            done: &mut std::collections::BTreeSet<String>,
            out: &mut Vec<String>,
        ) {
            if let Some(at) = path.iter().position(|p| p == f) {
                out.push(format!("{} -> {f}", path[at..].join(" -> ")));
                return;
            }
            if !done.insert(f.to_string()) {
                return;
            }
            path.push(f.to_string());
            for g in edges.get(f).into_iter().flatten() {
                visit(g, edges, path, done, out);
            }
            path.pop();
        }
        let mut done = Default::default();
        let mut found = Vec::new();
        for f in edges.keys() {
            visit(f, &edges, &mut Vec::new(), &mut done, &mut found);
        }
        circles.extend(found.into_iter().map(|c| format!("src/{top}: {c}")));
    }
    assert!(
        circles.is_empty(),
        "files in a circle:\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_checker_sees_paths_and_skips_tests() {
    assert_eq!(named_modules("use crate::rt::park;"), ["rt"]);
    assert_eq!(
        named_modules("use crate::{rt, sys::nanotime};"),
        ["rt", "sys"]
    );
    assert_eq!(
        named_modules("x = crate::sys::nanotime() + $crate::rt::y;"),
        ["sys"]
    );
    let text = "use crate::sys;\n#[cfg(test)]\nmod tests {\n    use crate::ffi;\n}\nfn f() { crate::rt::x(); } // crate::chan\n";
    let lines: Vec<String> = code_lines(text).into_iter().map(|(_, l)| l).collect();
    assert_eq!(lines, ["use crate::sys;", "fn f() { crate::rt::x(); } "]);
    let m = ["park".to_string(), "ready".to_string(), "timer".to_string()];
    assert_eq!(
        named_siblings("use super::{park::*, ready::wakep};", &m),
        ["park", "ready"]
    );
    assert_eq!(
        named_siblings("crate::rt::timer::x(); netpoll::y(); a_park::z()", &m),
        ["timer"]
    );
    assert_eq!(named_siblings("super::park;", &m), ["park"]);
    let re = reexports(
        "x\npub(crate) use park::wake_waiter;\npub use park::{gopark, goready};\npub use proc::{\n    newproc,\n};\npub use crate::sys::throw;\n",
    );
    assert_eq!(
        re,
        [
            ("wake_waiter".to_string(), "park".to_string()),
            ("gopark".to_string(), "park".to_string()),
            ("goready".to_string(), "park".to_string()),
            ("newproc".to_string(), "proc".to_string())
        ]
    );
    assert!(uses_name("unsafe { gopark(None, 0, r) };", "gopark"));
    assert!(uses_name("rt::goready(g);", "goready"));
    assert!(!uses_name("let _ = epoll::init();", "init"));
    assert!(!uses_name("pub(crate) fn init() {", "init"));
    assert!(!uses_name("x.init(); reinit();", "init"));
    assert!(!uses_name(
        "pub gomaxprocs: i32, f(\"gomaxprocs={}\")",
        "gomaxprocs"
    ));
}
