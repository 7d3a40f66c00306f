//! Windows on keyed streams (Flink's `WindowOperator` with its default triggers).
//!
//! - `assigner.rs`: [`TimeWindow`] (`[start, end)`, `max_timestamp = end - 1`) and
//!   [`WindowAssigner`], made with Flink's names: [`TumblingEventTimeWindows`],
//!   [`SlidingEventTimeWindows`], [`EventTimeSessionWindows`] and their processing-time twins.
//! - `function.rs`: what a window computes: [`AggregateFunction`] (an accumulator per window,
//!   never the records), [`ProcessWindowFunction`] (all records of the window), and
//!   [`WindowContents`], the shape the operator drives (reduce, aggregate and process are its
//!   three implementations).
//! - `panes.rs`: the contents of tumbling and sliding windows, one table per window, in window
//!   order: firing takes whole tables, and event-time panes need no timers.
//! - `operator.rs`: [`WindowOperator`]: assignment, lateness, firing and cleanup on timers of
//!   the `timer` service, session merging, late records to a side output or
//!   dropped and counted ([`LateRecordsDropped`]), window contents and timers in checkpoints by
//!   key group.
//!
//! On the stream API: `KeyedStream::window(assigner)` gives a `WindowedStream`, with
//! `allowed_lateness`, `side_output_late_data`, then `reduce`, `aggregate`, `aggregate_with`
//! or `process`.

mod assigner;
mod function;
mod operator;
mod panes;
#[cfg(test)]
mod tests;

pub use assigner::{
    EventTimeSessionWindows, ProcessingTimeSessionWindows, SlidingEventTimeWindows,
    SlidingProcessingTimeWindows, TimeWindow, TumblingEventTimeWindows,
    TumblingProcessingTimeWindows, WindowAssigner,
};
pub use function::{
    Aggregate, AggregateFunction, Process, ProcessWindowFunction, Reduce, WindowContents,
};
pub(crate) use operator::WindowSpec;
pub use operator::{LateRecordsDropped, WindowOperator};
