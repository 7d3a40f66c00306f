//! The error type user code returns, and turning a panic payload into a message.

use std::any::Any;

/// The error a user function, operator or sink returns.
///
/// Any error type converts into it with `?`, so user code keeps its own error types; the runtime
/// wraps it with the operator and subtask that produced it before failing the job.
///
/// ```
/// fn parse(s: &str) -> Result<u64, sluice_core::UserError> {
///     Ok(s.parse::<u64>()?)
/// }
/// assert!(parse("x").is_err());
/// ```
pub type UserError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The message carried by a panic payload, for error reports.
///
/// ```
/// let payload = std::panic::catch_unwind(|| panic!("boom {}", 7)).unwrap_err();
/// assert_eq!(sluice_core::panic_message(payload.as_ref()), "boom 7");
/// ```
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&'static str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".to_string()
    }
}
