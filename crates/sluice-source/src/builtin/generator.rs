//! [`DataGeneratorSource`]: records made by a function of their index, bounded or unbounded,
//! optionally rate-limited (Flink's `DataGeneratorSource`): a number sequence whose numbers go
//! through the function.

use crate::api::{Boundedness, ReaderContext, Source};
use crate::builtin::sequence::{MapFn, SequenceEnumerator, SequenceReader, SequenceSplit, cut};
use crate::coordinator::SplitEnumeratorContext;
use sluice_core::{Data, UserError};
use std::sync::Arc;

/// A source of `f(0), f(1), ...`: `take(n)` bounds it to `n` records, `rate_limit` caps the
/// records per second of the whole source (divided evenly over its readers).
///
/// ```
/// use sluice_runtime::prelude::*;
/// use sluice_source::{DataGeneratorSource, FromSource};
/// let env = StreamEnvironment::new();
/// env.set_parallelism(2);
/// let generator = DataGeneratorSource::new(|i| format!("event-{i}")).take(3);
/// let out = env.from_source(generator, None, "events").collect();
/// env.execute_blocking("events").unwrap();
/// let mut v = out.take();
/// v.sort();
/// assert_eq!(v, vec!["event-0", "event-1", "event-2"]);
/// ```
pub struct DataGeneratorSource<T> {
    f: MapFn<T>,
    count: Option<u64>,
    rate: Option<f64>,
}

impl<T> Clone for DataGeneratorSource<T> {
    fn clone(&self) -> Self {
        DataGeneratorSource {
            f: self.f.clone(),
            count: self.count,
            rate: self.rate,
        }
    }
}

impl<T: Data> DataGeneratorSource<T> {
    /// An unbounded source of `f(0), f(1), ...`.
    pub fn new(f: impl Fn(u64) -> T + Send + Sync + 'static) -> Self {
        DataGeneratorSource {
            f: Arc::new(f),
            count: None,
            rate: None,
        }
    }

    /// Stops after `n` records in total.
    pub fn take(mut self, n: u64) -> Self {
        self.count = Some(n);
        self
    }

    /// At most `records_per_second` records per second over all readers.
    pub fn rate_limit(mut self, records_per_second: f64) -> Self {
        self.rate = Some(records_per_second);
        self
    }
}

impl<T: Data> Source for DataGeneratorSource<T> {
    type Out = T;
    type Split = SequenceSplit;
    type Enumerator = SequenceEnumerator;
    type Reader = SequenceReader<T, Box<dyn Fn(u64) -> T + Send>>;

    fn boundedness(&self) -> Boundedness {
        match self.count {
            Some(_) => Boundedness::Bounded,
            None => Boundedness::ContinuousUnbounded,
        }
    }

    fn create_enumerator(
        &self,
        ctx: &SplitEnumeratorContext<SequenceEnumerator>,
    ) -> Result<SequenceEnumerator, UserError> {
        let splits = match self.count {
            Some(0) => Vec::new(),
            Some(n) => cut(0, n - 1, ctx.current_parallelism()),
            None => cut(0, u64::MAX, ctx.current_parallelism()),
        };
        Ok(SequenceEnumerator::new(splits))
    }

    fn restore_enumerator(
        &self,
        _ctx: &SplitEnumeratorContext<SequenceEnumerator>,
        checkpoint: Vec<SequenceSplit>,
    ) -> Result<SequenceEnumerator, UserError> {
        Ok(SequenceEnumerator::new(checkpoint))
    }

    fn create_reader(&self, ctx: ReaderContext) -> Result<Self::Reader, UserError> {
        let f = self.f.clone();
        Ok(SequenceReader::new(
            Box::new(move |i| f(i)),
            self.rate,
            ctx.parallelism(),
        ))
    }

    fn validate(&self) -> Result<(), UserError> {
        match self.rate {
            Some(r) if !(r > 0.0 && r.is_finite()) => Err(format!(
                "rate limit {r} records per second: must be positive and finite"
            )
            .into()),
            _ => Ok(()),
        }
    }
}
