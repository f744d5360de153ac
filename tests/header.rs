//! The committed C header `include/gmp-sched/gmp.h`: current, documented, and compatible with
//! GNU MP's `gmp.h` in one translation unit.

use std::path::{Path, PathBuf};
use std::process::Command;

/// GNU MP's C and C++ headers on Debian (libgmp-dev; scripts/install-deps.sh installs it).
const GNU_MP_HEADER: &str = "/usr/include/x86_64-linux-gnu/gmp.h";
const GNU_MPXX_HEADER: &str = "/usr/include/gmpxx.h";

fn committed() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("include/gmp-sched/gmp.h")
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
         run scripts/bless-header.sh and commit include/gmp-sched/gmp.h",
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
        "no gmp_ prototypes found in include/gmp-sched/gmp.h"
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
        "include/gmp-sched/gmp.h: no doc comment on {undocumented:?}"
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

/// Names a user's program may well give its own macros: the internal constants a header
/// generator could let through, and more.
const USER_MACROS: [&str; 16] = [
    "EXIT",
    "PARK",
    "YIELD",
    "SYSCALL",
    "MAX_FD",
    "SPAWN",
    "STEAL",
    "PREEMPT",
    "HANDOFF",
    "MODE_READ",
    "MODE_WRITE",
    "GO_START",
    "GO_STOP",
    "UNPARK",
    "SYSCALL_BEGIN",
    "SYSCALL_END",
];

/// After the includes: the user's own `select` (a libc name the library interposes, which
/// gmp.h must not declare) and a `main` that needs both libraries' headers — types,
/// functions and macros of each. If either header's include guard hid the other (say ours
/// were renamed to GNU MP's `__GMP_H__`), the names of the one dropped would be undeclared.
const USES_BOTH_C: &str = r#"
#if !defined(__GNU_MP_VERSION) || !defined(GMP_WG_INIT) || !defined(GMP_MAX_PROCS)
#error "one of the two headers was dropped"
#endif
static int select(const char *what) { return what != NULL; }
int main(void)
{
    mpz_t z;
    mpz_init_set_ui(z, 42);
    int big = mpz_cmp_ui(z, 41) > 0;
    mpz_clear(z);
    gmp_wg wg = GMP_WG_INIT;
    gmp_sched_stats st;
    int r = gmp_stats(&st, NULL, 0) + gmp_wg_wait(&wg) + gmp_maxprocs(0);
    return big + r + select("user");
}
"#;

/// The same for C++, with GNU MP's C++ class, the wrapper's types, and the user's own
/// enumerators named like the internal constants.
const USES_BOTH_CXX: &str = r#"
#if !defined(__GNU_MP_VERSION) || !defined(__GMP_PLUSPLUS__) || !defined(GMP_SCHED_HPP)
#error "one of the headers was dropped"
#endif
enum class State { RUN, PARK, YIELD, EXIT };
static int select(const char *what) { return what != nullptr; }
int main()
{
    mpz_class big = 1;
    big <<= 100;
    gmp::wait_group wg;
    wg.add(1);
    gmp::go([&wg] { wg.done(); });
    wg.wait();
    gmp_sched_stats st;
    State s = State::PARK;
    return (big > 1) + (s == State::EXIT) + select("user") + gmp_stats(&st, nullptr, 0);
}
"#;

/// The include directory of the source tree: `<gmp-sched/gmp.h>` resolves in it, and
/// `<gmp.h>` does not (GNU MP's is found on the system path).
fn include_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("include")
}

/// Compiles (syntax only) one user translation unit with every warning an error.
fn compile_user_tu(compiler: &str, std: &str, name: &str, text: &str) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("header");
    std::fs::create_dir_all(&dir).expect("create CARGO_TARGET_TMPDIR/header");
    let tu = dir.join(name);
    std::fs::write(&tu, text).expect("write translation unit");
    let out = Command::new(compiler)
        .arg(format!("-std={std}"))
        .args(["-Wall", "-Wextra", "-Werror", "-Wpedantic", "-fsyntax-only"])
        .arg("-I")
        .arg(include_dir())
        .arg(&tu)
        .output()
        .unwrap_or_else(|e| panic!("run {compiler}: {e}"));
    assert!(
        out.status.success(),
        "{compiler} -std={std} {}: our headers clash with GNU MP's or with the user's \
         names:\n{}\n--- {name}:\n{text}",
        tu.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every public header in every supported language standard, in one translation unit
/// with GNU MP's headers (either order) and a user's code: with the user's macros named
/// like common words defined first (a header that defined one again would get a
/// redefinition warning, one that used one an undeclared identifier) and without them
/// (a header that defined `PARK` would break the user's `enum class State`).
#[test]
fn headers_coexist_with_gnu_mp_and_user_names() {
    for (header, package) in [(GNU_MP_HEADER, "gmp.h"), (GNU_MPXX_HEADER, "gmpxx.h")] {
        assert!(
            Path::new(header).exists(),
            "GNU MP's {package} ({header}) is missing: run scripts/install-deps.sh \
             (libgmp-dev)"
        );
    }
    let own_macros: String = USER_MACROS
        .iter()
        .map(|m| format!("#define {m} user_macro_{m}_is_not_declared\n"))
        .collect();
    for with_macros in [true, false] {
        let prelude = if with_macros { own_macros.as_str() } else { "" };
        for ours_first in [true, false] {
            let order = |ours: &str, theirs: &str| {
                if ours_first {
                    format!("{ours}{theirs}")
                } else {
                    format!("{theirs}{ours}")
                }
            };
            let tag = format!(
                "{}_{}",
                if with_macros { "macros" } else { "plain" },
                if ours_first {
                    "ours_first"
                } else {
                    "gnu_first"
                }
            );
            let c = format!(
                "{prelude}#include <stdio.h>\n{}{USES_BOTH_C}",
                order("#include <gmp-sched/gmp.h>\n", "#include <gmp.h>\n")
            );
            for std in ["c11", "c17"] {
                compile_user_tu("cc", std, &format!("{tag}_{std}.c"), &c);
            }
            let cxx = format!(
                "{prelude}{}{USES_BOTH_CXX}",
                order(
                    "#include <gmp-sched/gmp.h>\n#include <gmp-sched/gmp.hpp>\n",
                    "#include <gmpxx.h>\n#include <gmp.h>\n"
                )
            );
            for std in ["c++17", "c++20"] {
                compile_user_tu("c++", std, &format!("{tag}_{std}.cpp"), &cxx);
            }
        }
    }
}

/// The file-scope names a C header declares: the macros it `#define`s (in every branch of
/// its conditionals) and the identifiers its declarations introduce at file scope
/// (functions, typedefs, struct/union/enum tags, variables), in order of appearance.
/// Comments, struct members and parameters are skipped; `extern "C" { }` is transparent
/// and `__attribute__((...))` is ignored. Made for cbindgen's output and the hand-written
/// parts of the header; not a C parser.
fn global_names(text: &str) -> (Vec<String>, Vec<String>) {
    // Comments out (string and character literals kept whole), continuation lines joined.
    let mut code = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut last = ' ';
                for c in chars.by_ref() {
                    if last == '*' && c == '/' {
                        break;
                    }
                    if c == '\n' {
                        code.push('\n');
                    }
                    last = c;
                }
                code.push(' ');
            }
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        code.push('\n');
                        break;
                    }
                }
            }
            '"' | '\'' => {
                code.push(c);
                while let Some(d) = chars.next() {
                    code.push(d);
                    if d == '\\' {
                        if let Some(e) = chars.next() {
                            code.push(e);
                        }
                    } else if d == c {
                        break;
                    }
                }
            }
            _ => code.push(c),
        }
    }
    let code = code.replace("\\\n", " ");

    let mut macros = Vec::new();
    let mut body = String::new();
    for line in code.lines() {
        let t = line.trim_start();
        if let Some(directive) = t.strip_prefix('#') {
            if let Some(rest) = directive.trim_start().strip_prefix("define") {
                let name: String = rest
                    .trim_start()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                macros.push(name);
            }
        } else {
            body.push_str(line);
            body.push('\n');
        }
    }

    // Tokens: identifiers and numbers whole, string literals whole, anything else one char.
    let mut tokens: Vec<String> = Vec::new();
    let mut it = body.chars().peekable();
    while let Some(c) = it.next() {
        if c.is_whitespace() {
            continue;
        }
        let mut tok = c.to_string();
        if c.is_alphanumeric() || c == '_' {
            while let Some(&d) = it.peek() {
                if !(d.is_alphanumeric() || d == '_') {
                    break;
                }
                tok.push(d);
                it.next();
            }
        } else if c == '"' || c == '\'' {
            while let Some(d) = it.next() {
                tok.push(d);
                if d == '\\' {
                    if let Some(e) = it.next() {
                        tok.push(e);
                    }
                } else if d == c {
                    break;
                }
            }
        }
        tokens.push(tok);
    }
    let is_ident = |t: &str| t.starts_with(|c: char| c.is_alphabetic() || c == '_');
    // `__attribute__((...))` out: it declares nothing.
    let mut kept = Vec::with_capacity(tokens.len());
    let mut skip = tokens.iter();
    while let Some(t) = skip.next() {
        if t != "__attribute__" {
            kept.push(t.clone());
            continue;
        }
        let mut level = 0usize;
        for t in skip.by_ref() {
            match t.as_str() {
                "(" => level += 1,
                ")" => level -= 1,
                _ => {}
            }
            if level == 0 {
                break;
            }
        }
    }
    let tokens = kept;

    #[derive(Clone, Copy, PartialEq)]
    enum Brace {
        /// `extern "C" {`: does not nest.
        ExternC,
        /// A function definition's body.
        Function,
        /// An enum's body: its constants are file-scope names too.
        Enum,
        Other,
    }
    let mut declared = Vec::new();
    let mut braces: Vec<Brace> = Vec::new();
    let depth = |braces: &[Brace]| braces.iter().filter(|b| **b != Brace::ExternC).count();
    let mut parens = 0usize;
    let mut named = false; // the current declarator's name is recorded
    let mut enum_next = false; // the next `{` opens an enum body
    let mut i = 0;
    while i < tokens.len() {
        let t = tokens[i].as_str();
        let top = depth(&braces) == 0 && parens == 0;
        let prev = i.checked_sub(1).map(|j| tokens[j].as_str());
        if t == ";" || t == ")" {
            enum_next = false;
        }
        match t {
            "extern"
                if tokens.get(i + 1).map(String::as_str) == Some("\"C\"")
                    && tokens.get(i + 2).map(String::as_str) == Some("{") =>
            {
                braces.push(Brace::ExternC);
                i += 2;
            }
            "struct" | "union" | "enum" => {
                enum_next = t == "enum";
                if top {
                    if let Some(tag) = tokens.get(i + 1).filter(|n| is_ident(n)) {
                        declared.push(tag.clone());
                        i += 1;
                    }
                }
            }
            _ if braces.last() == Some(&Brace::Enum)
                && is_ident(t)
                && matches!(prev, Some("{") | Some(",")) =>
            {
                declared.push(t.to_string());
            }
            "(" => {
                if top && !named {
                    if tokens.get(i + 1).map(String::as_str) == Some("*") {
                        if let Some(n) = tokens.get(i + 2).filter(|n| is_ident(n)) {
                            declared.push(n.clone());
                        }
                    } else if let Some(p) = prev.filter(|p| is_ident(p)) {
                        declared.push(p.to_string());
                    }
                    named = true;
                }
                parens += 1;
            }
            ")" => parens = parens.saturating_sub(1),
            "{" => {
                braces.push(if enum_next {
                    Brace::Enum
                } else if top && prev == Some(")") {
                    Brace::Function
                } else {
                    Brace::Other
                });
                enum_next = false;
            }
            "}" => {
                if braces.pop() == Some(Brace::Function) && depth(&braces) == 0 {
                    named = false;
                }
            }
            ";" | "," | "=" | "[" if top => {
                if !named {
                    if let Some(p) = prev.filter(|p| is_ident(p)) {
                        declared.push(p.to_string());
                    }
                }
                // After `=` or `[` comes no name; after `,` or `;` the next declarator's.
                named = t == "=" || t == "[";
            }
            _ => {}
        }
        i += 1;
    }
    declared.dedup();
    (macros, declared)
}

fn prefixed(name: &str) -> bool {
    name.starts_with("gmp_") || name.starts_with("GMP_")
}

#[test]
fn global_name_scanner_finds_every_kind() {
    let header = "#ifndef G_H\n#define G_H\n#include <stdint.h>\n\
        /* #define COMMENTED 1 */\n#define A 1 // #define B\n#  define C(x) \\\n  (x)\n\
        typedef struct gmp_chan gmp_chan;\n\
        typedef void (*fnptr)(void *arg);\n\
        typedef struct tagged { int member; struct inner *p; } td;\n\
        struct bare;\nenum colour { RED, GREEN };\n\
        #ifdef __cplusplus\nextern \"C\" {\n#endif\n\
        int64_t gmp_go(fnptr f, void *arg);\nconst char *version(void);\n\
        int gmp_accept(int fd, struct sockaddr *addr);\nextern int var, arr[3];\n\
        #ifdef __cplusplus\n}\n#endif\n\
        typedef td alias __attribute__((deprecated(\"use td\")));\n\
        static inline int fast(gmp_chan *c) { int local = 0; if (c) { local = 1; } return local; }\n\
        long after;\n#endif\n";
    let (macros, declared) = global_names(header);
    assert_eq!(macros, ["G_H", "A", "C"]);
    assert_eq!(
        declared,
        [
            "gmp_chan",
            "fnptr",
            "tagged",
            "td",
            "bare",
            "colour",
            "RED",
            "GREEN",
            "gmp_go",
            "version",
            "gmp_accept",
            "var",
            "arr",
            "alias",
            "fast",
            "after"
        ]
    );
}

#[test]
fn header_declares_only_prefixed_names() {
    let text = read(&committed());
    let (macros, declared) = global_names(&text);
    assert!(
        macros.len() > 10 && declared.len() > 50,
        "{macros:?} {declared:?}"
    );
    let stray: Vec<&String> = macros
        .iter()
        .chain(declared.iter())
        .filter(|n| !prefixed(n))
        .collect();
    assert!(
        stray.is_empty(),
        "{} declares names without the gmp_/GMP_ prefix (a user's macro or \
         identifier of that name would clash): {stray:?}",
        committed().display()
    );
}

#[test]
fn cxx_header_defines_only_prefixed_macros() {
    let path = include_dir().join("gmp-sched/gmp.hpp");
    let (macros, _) = global_names(&read(&path));
    assert!(macros.contains(&"GMP_SCHED_HPP".to_string()), "{macros:?}");
    let stray: Vec<&String> = macros.iter().filter(|n| !prefixed(n)).collect();
    assert!(
        stray.is_empty(),
        "{} defines macros without the GMP_/gmp_ prefix: {stray:?}",
        path.display()
    );
}

/// The deprecated spellings of the once (`gmp_once_t`, `gmp_once(o, fn, arg)`) still
/// compile, in C and C++, and the compiler warns where they are used.
#[test]
fn deprecated_once_spellings_compile_with_warnings() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("header");
    std::fs::create_dir_all(&dir).expect("create CARGO_TARGET_TMPDIR/header");
    let body = "#include <gmp-sched/gmp.h>\n\
                static void f(void *arg) { (void)arg; }\n\
                int main(void) {\n\
                \x20   static gmp_once_t o = GMP_ONCE_INIT;\n\
                \x20   return gmp_once(&o, f, NULL);\n\
                }\n";
    for (compiler, std, ext) in [("cc", "c11", "c"), ("c++", "c++17", "cpp")] {
        let tu = dir.join(format!("deprecated_once.{ext}"));
        std::fs::write(&tu, body).expect("write translation unit");
        let out = Command::new(compiler)
            .arg(format!("-std={std}"))
            .args(["-Wall", "-Wextra", "-Wpedantic", "-fsyntax-only", "-I"])
            .arg(include_dir())
            .arg(&tu)
            .output()
            .unwrap_or_else(|e| panic!("run {compiler}: {e}"));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success()
                && stderr.contains("gmp_once_t is gmp_once")
                && stderr.contains("is gmp_once_do(o, fn, arg)"),
            "{compiler} -std={std}: the deprecated once spellings must compile with \
             deprecation warnings:\n{stderr}"
        );
    }
}
