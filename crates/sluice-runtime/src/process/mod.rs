//! Process functions with timers and side outputs (Flink's `KeyedProcessFunction`,
//! `OutputTag`).
//!
//! - `function.rs`: [`KeyedProcessFunction`], the user's per-record and per-timer callbacks, and
//!   [`Context`], what a callback sees: the current key, the record's (or timer's) event time,
//!   the key's own state, the [`TimerService`], the main output and side outputs.
//! - `operator.rs`: [`KeyedProcessOperator`], the operator that runs a function after
//!   `key_by`: it keeps the per-key state and the timers (both keyed state, checkpointed by key
//!   group), fires event-time timers as the watermark passes them and processing-time timers
//!   from its `poll_pending`.
//! - `timed.rs`: `TimedOperator`, how a keyed operator fires its timers (shared with the window
//!   operator).
//! - `output.rs`: [`OutputTag`] and [`Tagged`], how main and side outputs share one operator
//!   output until the API splits them into streams.
//! - `join.rs`: the interval join: [`ProcessJoinFunction`], called for each joined pair, its
//!   [`JoinContext`], and the two-input operator behind `KeyedStream::interval_join` (each
//!   side's records per key by event time, cleanup timers, both checkpointed by key group).
//!
//! On the stream API: `KeyedStream::process_keyed` returns a `ProcessedStream`, which is the
//! main output and gives side outputs with `get_side_output`.

mod broadcast;
mod co;
mod function;
mod join;
mod operator;
mod output;
mod timed;
#[cfg(test)]
mod two_input_tests;

pub use crate::timer::TimeDomain;
pub(crate) use broadcast::BroadcastStates;
pub use broadcast::{
    BroadcastContext, BroadcastProcessFunction, BroadcastProcessOperator, BroadcastState,
    BroadcastValue, KeyedBroadcastContext, KeyedBroadcastProcessFunction,
    KeyedBroadcastProcessOperator, KeyedReadOnlyContext, MapStateDescriptor,
    ReadOnlyBroadcastContext,
};
pub use co::{
    CoContext, CoMapOperator, CoProcessFunction, CoProcessOperator, KeyedCoProcessFunction,
};
pub(crate) use co::{KeyedCo, either_key};
pub use function::{Context, KeyedProcessFunction, StateKey, TimerService};
pub(crate) use join::{IntervalJoinOperator, JoinBounds};
pub use join::{JoinContext, ProcessJoinFunction};
pub use operator::KeyedProcessOperator;
pub use output::{OutputTag, SideRecord, Tagged};
pub(crate) use timed::TimedOperator;
