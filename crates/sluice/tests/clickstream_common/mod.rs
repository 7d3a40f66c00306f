//! What the example tests share: the example binary beside the test binary, and the check
//! that a run passed.

use std::path::{Path, PathBuf};
use std::process::Output;

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

/// Asserts a zero exit status and the check's verdict; returns stdout and stderr.
// Not every example test uses it (each test file compiles this module on its own).
#[allow(dead_code)]
pub fn assert_passed(output: &Output) -> (String, String) {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "the example failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    assert!(
        stdout.contains("output check: PASSED"),
        "no passing check in the summary:\n{stdout}\n{stderr}"
    );
    (stdout, stderr)
}
