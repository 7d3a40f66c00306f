//! What the example tests share: the example binary beside the test binary.

use std::path::{Path, PathBuf};

/// The example binary beside this test's: `target/<profile>/deps/<test>` →
/// `target/<profile>/examples/clickstream`.
pub fn example_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test binary lives in target/<profile>/deps");
    let binary = profile_dir
        .join("examples")
        .join(format!("clickstream{}", std::env::consts::EXE_SUFFIX));
    assert!(
        binary.is_file(),
        "{} is missing: `cargo test` builds the examples first; with a filter, build it with \
         `cargo build -p sluice --example clickstream`",
        binary.display()
    );
    binary
}
