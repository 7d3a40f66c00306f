//! Event time: watermark generation at the sources and watermark merging at task inputs.
//!
//! [`WatermarkStrategy`] says how a stream's watermarks are generated: from a timestamp read out of
//! each record, a bound on out-of-orderness, and an idleness timeout after which a silent stream
//! stops holding event time back. The watermark valve (`valve.rs`, crate-private) is the pure
//! decision a task makes over its input channels: its watermark is the minimum over the live,
//! active channels. For example, with two channels:
//!
//! ```text
//! channel 0 delivers 10  -> nothing (channel 1 is still at the minimum)
//! channel 1 delivers 7   -> the task's watermark is 7
//! channel 1 delivers 20  -> the task's watermark is 10 (channel 0 now holds it back)
//! ```

mod strategy;
mod valve;

pub use strategy::WatermarkStrategy;
pub(crate) use valve::{ValveOutput, WatermarkValve};
