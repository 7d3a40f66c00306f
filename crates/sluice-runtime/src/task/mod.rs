//! Tasks: the unit that runs. One task runs one subtask of one operator chain.
//!
//! A task is one async loop on the tokio runtime, Flink's "mailbox": it waits on its input (when
//! every operator of the chain can take more), on room in its output channels, and on its
//! operators' pending work, and handles one thing at a time, so operator code never runs
//! concurrently with itself and never blocks a worker thread.

pub(crate) mod chain;
pub(crate) mod control;
pub(crate) mod input;
pub(crate) mod runner;
pub(crate) mod thread;
