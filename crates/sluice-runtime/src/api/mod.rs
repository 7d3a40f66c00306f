//! The DataStream API: build a job as a graph of streams, then execute it.
//!
//! ```
//! use sluice_runtime::prelude::*;
//! use sluice_runtime::window::{AggregateFunction, TumblingEventTimeWindows};
//! use std::time::Duration;
//!
//! let env = StreamEnvironment::new();
//! env.set_parallelism(2);
//! // Lines of text with their event time in milliseconds.
//! let lines = [("a b", 1_000i64), ("b c", 2_000), ("c", 61_000)].map(|(l, t)| (l.to_string(), t));
//! let counts = env
//!     .from_iter(lines)
//!     .assign_timestamps_and_watermarks(WatermarkStrategy::for_monotonous_timestamps(|l: &(String, i64)| l.1))
//!     .flat_map(|(line, _): (String, i64)| line.split(' ').map(str::to_string).collect::<Vec<_>>())
//!     .name("split")
//!     .key_by(|w: &String| w.clone())
//!     .window(TumblingEventTimeWindows::of(Duration::from_secs(60)))
//!     .aggregate_with(Count, |word: &String, minute, n| (word.clone(), minute.start, n))
//!     .collect();
//! let result = env.execute_blocking("words per minute").unwrap();
//! let mut out = counts.take();
//! out.sort();
//! assert_eq!(out, vec![
//!     ("a".into(), 0, 1), ("b".into(), 0, 2), ("c".into(), 0, 1), ("c".into(), 60_000, 1),
//! ]);
//! assert_eq!(result.metrics.operator("split").records_out, 5);
//!
//! /// Counts a window's words: one counter per word and minute, never the words themselves.
//! #[derive(Clone)]
//! struct Count;
//! impl AggregateFunction<String> for Count {
//!     type Acc = u64;
//!     type Out = u64;
//!     fn create_accumulator(&self) -> u64 { 0 }
//!     fn add(&self, _word: String, n: &mut u64) { *n += 1; }
//!     fn get_result(&self, n: &u64) -> u64 { *n }
//!     fn merge(&self, a: u64, b: u64) -> u64 { a + b }
//! }
//! ```

mod broadcast;
mod connected;
mod environment;
mod join;
mod keyed;
mod processed;
mod sink;
mod source;
mod stream;
mod two_phase;
mod windowed;

pub use broadcast::{BroadcastConnectedStream, BroadcastStream, KeyedBroadcastConnectedStream};
pub use connected::{ConnectedStreams, KeyedConnectedStreams};
pub use environment::StreamEnvironment;
pub use join::{
    CoGroup, CoGroupedStreams, IntervalJoin, IntervalJoined, Join, JoinEqualTo, JoinWhere,
    JoinWindow, JoinedStreams,
};
pub use keyed::KeyedStream;
pub use processed::ProcessedStream;
pub use sink::{CollectHandle, Sink};
pub use source::{Generator, RateLimiter};
pub use stream::{DataStream, DataStreamSink};
pub use two_phase::{Restored, TwoPhaseCommitOp, TwoPhaseCommitSink};
pub use windowed::WindowedStream;
