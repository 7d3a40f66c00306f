//! Helpers for tests that need a server CI starts (`.ci/services`, `.ci/s3`): read the
//! variable naming it, skipping the test with a notice outside CI and failing under CI, and
//! create an S3 bucket on an S3-compatible test server.

use std::io::{self, Read, Write};

/// The value of the environment variable `var`, which names a server or tool a test needs
/// (`how` says how to provide it). Unset: under CI (`CI` set) this panics, so a missing server
/// fails the run; elsewhere it prints that the test is skipped and returns `None`.
///
/// ```
/// use sluice_runtime::testing::required_env;
///
/// if std::env::var_os("CI").is_none() {
///     assert_eq!(required_env("SLUICE_NO_SUCH_SERVER", "start one"), None);
/// }
/// ```
pub fn required_env(var: &str, how: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(value) => Some(value),
        Err(_) if std::env::var_os("CI").is_some() => {
            panic!("{var} is not set under CI ({how})")
        }
        Err(_) => {
            eprintln!("skipped: set {var} ({how}) to run this test");
            None
        }
    }
}

/// Creates `bucket` on the S3-compatible server at `endpoint` (`http://host:port`) with a plain
/// path-style `PUT`, as test servers such as moto's take unsigned requests (object-store
/// clients read and write objects but do not create buckets). Blocking: call it from test
/// setup, not from a runtime worker.
pub fn create_s3_bucket(endpoint: &str, bucket: &str) -> io::Result<()> {
    let host = endpoint
        .strip_prefix("http://")
        .ok_or_else(|| {
            io::Error::other(format!("the S3 endpoint {endpoint} is not an http:// URL"))
        })?
        .trim_end_matches('/');
    let mut stream = std::net::TcpStream::connect(host)?;
    write!(
        stream,
        "PUT /{bucket} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    if answer.starts_with("HTTP/1.1 200") || answer.starts_with("HTTP/1.0 200") {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "creating bucket {bucket} at {endpoint}: {answer}"
        )))
    }
}
