//! Timers of keyed operators (Flink's `InternalTimerService`): event-time and processing-time
//! timers per key and namespace, as keyed state.
//!
//! - [`TimerQueue`] (`queue.rs`): one time domain's timers, a pure structure. A timer is a
//!   (key, namespace, timestamp); registering the same one twice keeps one; timers leave in
//!   timestamp order (registration order among equal timestamps) once time passes them.
//! - [`InternalTimers`] (`service.rs`): both domains of one operator, the current watermark and
//!   processing time, snapshots by key group and restores, and the one tokio timer that wakes
//!   the operator for the earliest processing-time timer.
//! - [`StoredTimers`](stored::StoredTimers) (`stored.rs`): one domain's timers in the job's keyed
//!   store instead, when the job has a store backend (Flink's RocksDB timers); `InternalTimers`
//!   moves its timers there when the operator attaches it.
//! - [`ProcessingClock`] (`clock.rs`): processing time in milliseconds since the Unix epoch,
//!   read from tokio's clock so that tests can pause and advance it.
//!
//! Timers are stored in checkpoints as keyed entries (state name `_timers/<name>`), one per key
//! group, so a restore at another parallelism deals each timer to the subtask that owns its key,
//! like any keyed state. A restored timer whose time passed during the outage fires once, at
//! the first watermark (event time) or the first poll (processing time) after the restore.

mod clock;
mod queue;
mod service;
mod stored;

pub(crate) use clock::ProcessingClock;
pub(crate) use queue::TimerQueue;
pub use service::TimeDomain;
pub(crate) use service::{InternalTimers, Timer};
