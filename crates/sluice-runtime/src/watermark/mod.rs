//! Event time: watermark generation at the sources and watermark merging at task inputs.
//!
//! [`WatermarkStrategy`] says how a stream's watermarks are generated: from a timestamp read out of
//! each record, a bound on out-of-orderness, and an idleness timeout after which a silent stream
//! stops holding event time back. [`WatermarkValve`] is the pure decision a task makes over its
//! input channels: its watermark is the minimum over the live, active channels.

mod strategy;
mod valve;

pub use strategy::WatermarkStrategy;
pub use valve::{ValveOutput, WatermarkValve};
