//! One version everywhere: Cargo.toml's. The header's GMP_SCHED_VERSION_* macros (build.rs
//! writes them), gmp_sched_version(), and the Python package's metadata must all say it.
//! (CMake reads it from Cargo.toml; tests/cmake.rs checks the installed package's.)

use std::ffi::CStr;
use std::path::Path;

const VERSION: &str = env!("CARGO_PKG_VERSION");

fn read(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The value of `#define NAME value` in `text`.
fn define<'a>(text: &'a str, name: &str) -> &'a str {
    text.lines()
        .find_map(|l| {
            let rest = l.strip_prefix("#define ")?.strip_prefix(name)?;
            rest.starts_with(' ').then(|| rest.trim())
        })
        .unwrap_or_else(|| panic!("gmp.h does not define {name}"))
}

#[test]
fn header_macros_are_cargo_version() {
    let header = read("include/gmp-sched/gmp.h");
    let parts = [
        define(&header, "GMP_SCHED_VERSION_MAJOR"),
        define(&header, "GMP_SCHED_VERSION_MINOR"),
        define(&header, "GMP_SCHED_VERSION_PATCH"),
    ];
    assert_eq!(parts.join("."), VERSION);
    assert_eq!(
        define(&header, "GMP_SCHED_VERSION"),
        format!("\"{VERSION}\"")
    );
}

#[test]
fn library_version_is_cargo_version() {
    // SAFETY: gmp_sched_version returns a static NUL-terminated string.
    let v = unsafe { CStr::from_ptr(gmp::ffi::gmp_sched_version()) };
    assert_eq!(v.to_str(), Ok(VERSION));
}

#[test]
fn python_package_version_is_cargo_version() {
    let pyproject = read("bindings/python/pyproject.toml");
    assert!(
        pyproject
            .lines()
            .any(|l| l == format!("version = \"{VERSION}\"")),
        "bindings/python/pyproject.toml: version is not {VERSION}"
    );
    let init = read("bindings/python/src/gmp_sched/__init__.py");
    assert!(
        init.lines()
            .any(|l| l == format!("__version__ = \"{VERSION}\"")),
        "bindings/python/src/gmp_sched/__init__.py: __version__ is not {VERSION}"
    );
}
