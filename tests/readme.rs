//! The documentation's complete programs compile warning-free and run, and the API
//! guide names every function of the header.
//!
//! A fenced ```c (or ```cpp) block of README.md or of a `docs/*.md` file that follows the
//! HTML comment `<!-- test: run -->` (blank lines between are allowed) is a whole
//! program: it is
//! compiled against the library this `cargo test` built, with `cc -std=c11 -Wall -Wextra
//! -Werror -Wpedantic` (`c++ -std=c++17` and the same warnings for C++), linked by path
//! with an rpath to a `libgmp.so.0` symlink (as the C tests do: `tests/support/ctest.rs`),
//! run with a clean `GMP_*` environment, and must exit 0 within [`TIMEOUT`].
//!
//! The README writes `#include <gmp-sched/gmp.h>`, the installed layout. When the
//! repository's headers are not under `include/gmp-sched/`, the compiler also gets a
//! directory holding a `gmp-sched` symlink to `include/`, so that both spellings work.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

mod common;
#[allow(dead_code)] // each test binary uses its own part of the helpers
mod support;
use common::library;

/// A program still running after this long is killed and its test fails.
const TIMEOUT: Duration = Duration::from_secs(60);

/// The comment that marks the next code block as a complete program.
const MARKER: &str = "<!-- test: run -->";

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn out_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("readme");
    std::fs::create_dir_all(&dir).expect("create CARGO_TARGET_TMPDIR/readme");
    dir
}

/// A marked block: its language (`c` or `cpp`), the README line its code starts on, and
/// the code.
#[derive(Debug)]
struct Block {
    lang: String,
    line: usize,
    code: String,
}

/// Every block that follows a [`MARKER`]; panics when a marker is not followed by a
/// fenced block of a language this test compiles, or a block is not closed.
fn marked_blocks(text: &str) -> Vec<Block> {
    let lines: Vec<&str> = text.lines().collect();
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim() != MARKER {
            i += 1;
            continue;
        }
        let marker_line = i + 1;
        i += 1;
        while i < lines.len() && lines[i].trim().is_empty() {
            i += 1;
        }
        let lang = lines
            .get(i)
            .and_then(|l| l.trim().strip_prefix("```"))
            .filter(|l| *l == "c" || *l == "cpp")
            .unwrap_or_else(|| {
                panic!("line {marker_line}: {MARKER} is not followed by a ```c or ```cpp block")
            })
            .to_string();
        let start = i + 1;
        let end = (start..lines.len())
            .find(|&j| lines[j].trim() == "```")
            .unwrap_or_else(|| panic!("line {start}: unterminated code block"));
        blocks.push(Block {
            lang,
            line: start + 1,
            code: lines[start..end].join("\n") + "\n",
        });
        i = end + 1;
    }
    blocks
}

/// The `-I` directories: the repository's `include/`, and, unless the headers already
/// sit in `include/gmp-sched/`, a directory whose `gmp-sched` links to `include/`.
fn include_dirs() -> Vec<PathBuf> {
    let include = manifest_dir().join("include");
    let mut dirs = vec![include.clone()];
    if !include.join("gmp-sched").join("gmp.h").exists() {
        let shim = out_dir().join("include");
        std::fs::create_dir_all(&shim).expect("create readme/include");
        let link = shim.join("gmp-sched");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&include, &link).expect("symlink include/gmp-sched");
        dirs.push(shim);
    }
    dirs
}

/// A directory holding only `libgmp.so.0 -> <library()>`, for the programs' rpath.
fn soname_dir() -> PathBuf {
    let dir = out_dir().join("lib");
    std::fs::create_dir_all(&dir).expect("create readme/lib");
    let link = dir.join("libgmp.so.0");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(library(), &link).expect("symlink libgmp.so.0");
    dir
}

/// The documents whose marked blocks run: README.md and every `docs/*.md`.
fn documents() -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = std::fs::read_dir(manifest_dir().join("docs"))
        .expect("read docs/")
        .map(|e| e.expect("docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    docs.insert(0, manifest_dir().join("README.md"));
    docs
}

/// Compiles `block` into an executable; returns its path.
fn compile(block: &Block, name: &str, includes: &[PathBuf], rpath: &Path) -> PathBuf {
    let (compiler, std, ext) = match block.lang.as_str() {
        "c" => ("cc", "-std=c11", "c"),
        _ => ("c++", "-std=c++17", "cpp"),
    };
    let src = out_dir().join(format!("{name}.{ext}"));
    std::fs::write(&src, &block.code).expect("write the block");
    let exe = out_dir().join(name);
    let mut cmd = Command::new(compiler);
    cmd.args([
        std,
        "-Wall",
        "-Wextra",
        "-Werror",
        "-Wpedantic",
        "-O2",
        "-pthread",
    ]);
    for dir in includes {
        cmd.arg("-I").arg(dir);
    }
    cmd.arg(&src)
        .arg(library())
        .arg(format!("-Wl,-rpath,{}", rpath.display()))
        .arg("-o")
        .arg(&exe);
    let what = format!("{name}: {compiler} {}", src.display());
    support::run_ok(cmd, &what, TIMEOUT);
    exe
}

#[test]
fn marked_blocks_are_found() {
    let text = "text\n<!-- test: run -->\n\n```c\nint main(void) { return 0; }\n```\n\
                  ```c\nnot marked\n```\n<!-- test: run -->\n```cpp\nint main() {}\n```\n";
    let blocks = marked_blocks(text);
    assert_eq!(blocks.len(), 2, "{blocks:?}");
    assert_eq!(blocks[0].lang, "c");
    assert_eq!(blocks[0].line, 5);
    assert_eq!(blocks[0].code, "int main(void) { return 0; }\n");
    assert_eq!(blocks[1].lang, "cpp");
    assert_eq!(blocks[1].code, "int main() {}\n");
}

#[test]
#[should_panic(expected = "is not followed by")]
fn a_marker_without_a_block_fails() {
    marked_blocks("<!-- test: run -->\nsome prose\n");
}

/// Every marked program of the README and the guides builds warning-free against the
/// library and exits 0; the README's hello world is one of them.
#[test]
fn marked_programs_run() {
    let includes = include_dirs();
    let rpath = soname_dir();
    let mut ran = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).expect("read a document");
        let file = doc
            .file_name()
            .expect("a file")
            .to_string_lossy()
            .into_owned();
        let blocks = std::panic::catch_unwind(|| marked_blocks(&text))
            .unwrap_or_else(|_| panic!("{file}: a {MARKER} block is malformed (above)"));
        for block in &blocks {
            let name = format!("{}_line{}", file.trim_end_matches(".md"), block.line);
            let exe = compile(block, &name, &includes, &rpath);
            let mut run = Command::new(&exe);
            run.current_dir(out_dir())
                // cargo points LD_LIBRARY_PATH at target/<profile>, which may hold a stale
                // copy; the rpath names the library this test built.
                .env_remove("LD_LIBRARY_PATH");
            let what = format!("{file}:{}", block.line);
            let out = support::run_ok(run, &what, TIMEOUT);
            eprintln!("{what}: ok\n{}", out.stdout);
            ran.push(what);
        }
    }
    assert!(
        ran.iter().any(|w| w.starts_with("README.md:")),
        "README.md has no {MARKER} block: its hello world must stay tested (ran: {ran:?})"
    );
}

/// The header's functions: the names of its prototypes (`... gmp_x(...);` at the start of
/// a line), not the static inline helpers.
fn header_functions() -> Vec<String> {
    let include = manifest_dir().join("include");
    let header = [
        include.join("gmp-sched").join("gmp.h"),
        include.join("gmp.h"),
    ]
    .into_iter()
    .find(|p| p.exists())
    .expect("include/gmp-sched/gmp.h or include/gmp.h");
    let text = std::fs::read_to_string(&header).expect("read gmp.h");
    let mut names: Vec<String> = text
        .lines()
        .filter(|l| !l.starts_with(' ') && !l.starts_with("static") && l.trim_end().ends_with(");"))
        .filter_map(|l| {
            let name = l[..l.find('(')?].rsplit([' ', '*']).next()?;
            name.starts_with("gmp_").then(|| name.to_string())
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

/// docs/api.md, the guide by topic, names every function the header declares.
#[test]
fn api_guide_names_every_function() {
    let functions = header_functions();
    assert!(
        functions.len() > 50,
        "too few prototypes found in gmp.h: {functions:?}"
    );
    let guide = std::fs::read_to_string(manifest_dir().join("docs/api.md")).expect("docs/api.md");
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let missing: Vec<&String> = functions
        .iter()
        .filter(|f| {
            !guide.match_indices(f.as_str()).any(|(i, _)| {
                let after = guide[i + f.len()..].chars().next();
                let before = guide[..i].chars().next_back();
                !after.is_some_and(is_word) && !before.is_some_and(is_word)
            })
        })
        .collect();
    assert!(missing.is_empty(), "docs/api.md does not name {missing:?}");
}
