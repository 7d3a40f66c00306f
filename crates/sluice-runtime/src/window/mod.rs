//! Windows on keyed streams (Flink's `WindowOperator` and `EvictingWindowOperator`, with
//! triggers and evictors).
//!
//! - `assigner.rs`: [`TimeWindow`] (`[start, end)`, `max_timestamp = end - 1`) and
//!   [`WindowAssigner`], made with Flink's names: [`TumblingEventTimeWindows`],
//!   [`SlidingEventTimeWindows`], [`EventTimeSessionWindows`], their processing-time twins, and
//!   [`GlobalWindows`] (one window per key, [`TimeWindow::GLOBAL`]).
//! - `trigger.rs`: the [`Trigger`] trait, its [`TriggerContext`] (timers, watermark, processing
//!   time, partitioned state: [`ReducingState`], [`ValueState`]), [`OnMergeContext`] and
//!   [`TriggerResult`].
//! - `triggers.rs`: Flink's built-in triggers: [`EventTimeTrigger`], [`ProcessingTimeTrigger`],
//!   [`CountTrigger`], [`PurgingTrigger`], [`ContinuousEventTimeTrigger`],
//!   [`ContinuousProcessingTimeTrigger`], [`NeverTrigger`].
//! - `evictor.rs`: the [`Evictor`] trait over [`TimestampedValue`]s, [`CountEvictor`] and
//!   [`TimeEvictor`].
//! - `function.rs`: what a window computes: [`AggregateFunction`] (an accumulator per window,
//!   never the records), [`ProcessWindowFunction`] (all records of the window), and
//!   [`WindowContents`], the shape the operator drives (reduce, aggregate and process are its
//!   three implementations).
//! - `panes.rs`: the contents of tumbling and sliding windows, one table per window, in window
//!   order: firing takes whole tables, and event-time panes need no timers.
//! - `stored.rs`: with a keyed store (RocksDB), the contents of the window operator's windows
//!   in it, one entry per (window, key), keyed window first so that a pane is a range to scan.
//! - `operator.rs`: [`WindowOperator`]: assignment, lateness, firing and cleanup on timers of
//!   the `timer` service, session merging, late records to a side output or
//!   dropped and counted ([`LateRecordsDropped`]), window contents and timers in checkpoints by
//!   key group. It runs windows with their assigner's default trigger and no evictor, and
//!   implements those triggers itself, without calling one.
//! - `triggered.rs`: the operator for every other window (a trigger set, an evictor, global
//!   windows): Flink's rules record by record, with the trigger's state and (with an evictor)
//!   every record of each window in checkpoints by key group.
//!
//! On the stream API: `KeyedStream::window(assigner)` gives a `WindowedStream`, with
//! `allowed_lateness`, `side_output_late_data`, `trigger`, `evictor`, then `reduce`,
//! `aggregate`, `aggregate_with` or `process`; `KeyedStream::count_window` and
//! `count_window_sliding` are Flink's `countWindow`.

mod assigner;
mod evictor;
mod function;
mod operator;
mod panes;
mod stored;
#[cfg(test)]
mod tests;
mod trigger;
#[cfg(test)]
mod trigger_tests;
mod triggered;
mod triggers;

pub use assigner::{
    EventTimeSessionWindows, GlobalWindows, ProcessingTimeSessionWindows, SlidingEventTimeWindows,
    SlidingProcessingTimeWindows, TimeWindow, TumblingEventTimeWindows,
    TumblingProcessingTimeWindows, WindowAssigner,
};
pub(crate) use evictor::AnyEvictor;
pub use evictor::{CountEvictor, Evictor, EvictorContext, TimeEvictor, TimestampedValue};
pub use function::{
    Aggregate, AggregateFunction, Process, ProcessWindowFunction, Reduce, WindowContents,
};
pub(crate) use operator::WindowSpec;
pub use operator::{LateRecordsDropped, WindowOperator};
pub use trigger::{
    OnMergeContext, ReducingState, ReducingStateDescriptor, Trigger, TriggerContext, TriggerResult,
    ValueState, ValueStateDescriptor,
};
pub(crate) use triggered::{Evicting, Incremental, TriggerWindowOperator};
pub(crate) use triggers::AnyTrigger;
pub use triggers::{
    ContinuousEventTimeTrigger, ContinuousProcessingTimeTrigger, CountTrigger, EventTimeTrigger,
    NeverTrigger, ProcessingTimeTrigger, PurgingTrigger,
};
