//! The committed C header `include/gmp.h`: current, documented, and compatible with
//! GNU MP's `gmp.h` in one translation unit.

use std::path::{Path, PathBuf};
use std::process::Command;

/// GNU MP's header on Debian (libgmp-dev, pulled in by gcc's toolchain packages).
const GNU_MP_HEADER: &str = "/usr/include/x86_64-linux-gnu/gmp.h";

fn committed() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("include")
        .join("gmp.h")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn header_is_up_to_date() {
    let generated = concat!(env!("OUT_DIR"), "/gmp.h");
    let fresh = std::fs::read(generated).unwrap_or_else(|e| panic!("{generated}: {e}"));
    let path = committed();
    let old = std::fs::read(&path).unwrap_or_default();
    assert!(
        old == fresh,
        "{} differs from the header build.rs generated from src/ffi ({generated}): \
         run scripts/bless-header.sh and commit include/gmp.h",
        path.display()
    );
}

/// Top-level function prototypes `... gmp_name(...);` of a C header, as
/// (line index, name). Type definitions, macros and comment lines are skipped; cbindgen
/// writes each prototype on one line (`args = "horizontal"`).
fn prototypes(lines: &[&str]) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let l = line.trim_end();
        if l.starts_with(|c: char| c.is_whitespace() || c == '#' || c == '/' || c == '*')
            || l.starts_with("typedef")
            || !l.ends_with(");")
        {
            continue;
        }
        let Some(open) = l.find('(') else { continue };
        let name = l[..open]
            .rsplit(|c: char| !(c.is_alphanumeric() || c == '_'))
            .next();
        if let Some(name) = name.filter(|n| n.starts_with("gmp_")) {
            out.push((i, name.to_string()));
        }
    }
    out
}

#[test]
fn header_documents_every_function() {
    let text = read(&committed());
    let lines: Vec<&str> = text.lines().collect();
    let protos = prototypes(&lines);
    assert!(
        !protos.is_empty(),
        "no gmp_ prototypes found in include/gmp.h"
    );
    let mut undocumented = Vec::new();
    for (i, name) in &protos {
        // The doc comment ends on the line just above the prototype and says something.
        let above = lines[..*i]
            .iter()
            .rev()
            .map(|l| l.trim())
            .find(|l| !l.is_empty());
        let documented = match above {
            Some(l) if l.ends_with("*/") => {
                let start = lines[..*i]
                    .iter()
                    .rposition(|l| l.contains("/*"))
                    .unwrap_or(0);
                let comment: String = lines[start..*i].concat();
                comment.chars().filter(|c| c.is_alphabetic()).count() >= 3
            }
            Some(l) => l.starts_with("//") && l.chars().filter(|c| c.is_alphabetic()).count() >= 3,
            None => false,
        };
        if !documented {
            undocumented.push(name.as_str());
        }
    }
    assert!(
        undocumented.is_empty(),
        "include/gmp.h: no doc comment on {undocumented:?}"
    );
}

#[test]
fn prototype_scanner_finds_functions_only() {
    let header = "/* doc */\nint64_t gmp_go(gmp_func fn, void *arg);\n\
                  typedef void (*gmp_func)(void *arg);\n#define GMP_X(a) (a)\n \
                  * gmp_go(fn, arg);\nstruct gmp_stats { int32_t n; };\n\
                  int gmp_stats(struct gmp_stats *out, uint32_t *runq_lens, size_t n);\n";
    let lines: Vec<&str> = header.lines().collect();
    let names: Vec<String> = prototypes(&lines).into_iter().map(|(_, n)| n).collect();
    assert_eq!(names, ["gmp_go", "gmp_stats"]);
}

/// A `main` that needs both headers: types, functions and macros of each. If either
/// header's include guard hid the other (say ours were renamed to GNU MP's `__GMP_H__`),
/// the names of the one dropped would be undeclared and the compile would fail.
const USES_BOTH: &str = r#"
#if !defined(__GNU_MP_VERSION) || !defined(GMP_WG_INIT) || !defined(GMP_MAX_PROCS)
#error "one of the two headers was dropped"
#endif
int main(void)
{
    mpz_t z;
    mpz_init_set_ui(z, 42);
    int big = mpz_cmp_ui(z, 41) > 0;
    mpz_clear(z);
    gmp_wg wg = GMP_WG_INIT;
    gmp_sched_stats st;
    int r = gmp_stats(&st, NULL, 0) + gmp_wg_wait(&wg) + gmp_maxprocs(0);
    return big + r;
}
"#;

/// Compiles a C11 TU including GNU MP's header and ours in the given order.
fn compile_with_gnu_mp(ours_first: bool) {
    if !Path::new(GNU_MP_HEADER).exists() {
        eprintln!("{GNU_MP_HEADER} not installed: skipped");
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("header");
    std::fs::create_dir_all(&dir).expect("create CARGO_TARGET_TMPDIR/header");
    let ours = format!("#include \"{}\"\n", committed().display());
    let theirs = format!("#include \"{GNU_MP_HEADER}\"\n");
    let (first, second) = if ours_first {
        (&ours, &theirs)
    } else {
        (&theirs, &ours)
    };
    let tu = dir.join(format!(
        "with_gnu_mp_{}.c",
        if ours_first { "after" } else { "before" }
    ));
    std::fs::write(
        &tu,
        format!("#include <stdio.h>\n{first}{second}{USES_BOTH}"),
    )
    .expect("write translation unit");
    let out = Command::new("cc")
        .args([
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-Wpedantic",
            "-fsyntax-only",
        ])
        .arg(&tu)
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "include/gmp.h clashes with GNU MP's {GNU_MP_HEADER}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn header_coexists_with_gnu_mp_header() {
    compile_with_gnu_mp(true);
    compile_with_gnu_mp(false);
}
