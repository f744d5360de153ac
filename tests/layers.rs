//! The crate's layers point down only (HACKING.md, "The layers"): a module of one floor
//! may name its own floor's modules that come after it in [`FLOORS`] and any module of a
//! lower floor, never one above. Read from the source: every `crate::…` path outside test
//! code (a `#[cfg(test)]` or loom module, `tests.rs`, `*_loom.rs`) counts, `use` or not.

use std::path::{Path, PathBuf};

/// The crate's top-level modules, top floor first. Within a floor, a module may name
/// those after it in the same list (`interpose` may use `ffi`'s panic boundary, `chan`
/// may use `sync`, `stack` may use `arch`).
const FLOORS: &[&[&str]] = &[
    &["interpose", "ffi"],
    &["poll"],
    &["chan", "sync"],
    &["rt"],
    &["stack", "arch"],
    &["sys"],
    &["loom"],
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
                let name: String = part
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    out.push(name);
                }
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            out.push(name);
        }
    }
    out
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
}
