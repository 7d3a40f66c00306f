//! The DataStream API: build a job as a graph of streams, then execute it.
//!
//! ```
//! use sluice_runtime::prelude::*;
//!
//! let env = StreamEnvironment::new();
//! env.set_parallelism(2);
//! let words = env.from_iter(vec!["a b", "b c", "c"]);
//! let counts = words
//!     .flat_map(|line: &str| line.split(' ').map(str::to_string).collect::<Vec<_>>())
//!     .name("split")
//!     .key_by(|w: &String| w.clone())
//!     .process(WordCount::default())
//!     .collect();
//! let result = env.execute_blocking("words").unwrap();
//! let mut out = counts.take();
//! out.sort();
//! assert_eq!(out, vec![("a".into(), 1), ("b".into(), 1), ("b".into(), 2), ("c".into(), 1), ("c".into(), 2)]);
//! assert_eq!(result.metrics.operator("split").records_out, 5);
//!
//! #[derive(Clone, Default)]
//! struct WordCount(std::collections::HashMap<String, u64>);
//! impl Operator<String> for WordCount {
//!     type Out = (String, u64);
//!     fn process_batch(&mut self, batch: Vec<String>, out: &mut Collector<(String, u64)>) -> Result<(), UserError> {
//!         for w in batch {
//!             let n = self.0.entry(w.clone()).or_default();
//!             *n += 1;
//!             out.collect((w, *n));
//!         }
//!         Ok(())
//!     }
//! }
//! ```

mod environment;
mod keyed;
mod sink;
mod source;
mod stream;
mod two_phase;

pub use environment::StreamEnvironment;
pub use keyed::KeyedStream;
pub use sink::{CollectHandle, Sink};
pub use source::{Generator, RateLimiter};
pub use stream::{DataStream, DataStreamSink};
pub(crate) use two_phase::TwoPhaseCommitOp;
pub use two_phase::TwoPhaseCommitSink;
