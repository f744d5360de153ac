//! Helpers shared by the integration tests that look at the built library.

use std::path::PathBuf;

/// The `libgmp.so` to test: `deps/libgmp.so` beside this test executable (what this
/// `cargo test` built), else `target/<profile>/libgmp.so`.
pub fn library() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe
        .parent()
        .expect("test executable has a parent directory");
    let profile = deps.parent().expect("deps has a parent directory");
    for lib in [deps.join("libgmp.so"), profile.join("libgmp.so")] {
        if lib.exists() {
            return lib;
        }
    }
    panic!(
        "no libgmp.so in {} or {}: cargo should have built the cdylib",
        deps.display(),
        profile.display()
    )
}
