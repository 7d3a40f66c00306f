//! [`DataGeneratorSource`]: records made by a function of their index, bounded or unbounded,
//! optionally rate-limited (Flink's `DataGeneratorSource`): the runtime's [`Generator`] as a
//! split source, that is a number sequence whose numbers go through the function.

use crate::builtin::sequence::SequenceSource;
use sluice_core::Data;
use sluice_runtime::Generator;

/// A [`Generator`] (`f(0), f(1), ...`, bounded by `take`, rate-limited over the whole source by
/// `rate_limit`) as a split source: its indices are cut into one split per subtask, so it may
/// resume mid-split and change parallelism on restore.
///
/// ```
/// use sluice_runtime::prelude::*;
/// use sluice_source::{DataGeneratorSource, FromSource};
/// let env = StreamEnvironment::new();
/// env.set_parallelism(2);
/// let generator = Generator::new(|i| format!("event-{i}")).take(3);
/// let out = env.from_source(DataGeneratorSource::from_generator(generator), None, "events").collect();
/// env.execute_blocking("events").unwrap();
/// let mut v = out.take();
/// v.sort();
/// assert_eq!(v, vec!["event-0", "event-1", "event-2"]);
/// ```
pub type DataGeneratorSource<F> = SequenceSource<F>;

impl<T: Data, F: Fn(u64) -> T + Clone + Send + Sync + 'static> SequenceSource<F> {
    /// The split source of `generator`.
    pub fn from_generator(generator: Generator<F>) -> Self {
        SequenceSource::generated(
            generator.count(),
            generator.function().clone(),
            generator.rate(),
        )
    }
}
