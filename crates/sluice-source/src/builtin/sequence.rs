//! [`SequenceSource`]: a range of numbers cut into splits and mapped into records, behind both
//! [`NumberSequenceSource`] (Flink's, a bounded range) and
//! [`DataGeneratorSource`](crate::DataGeneratorSource) (records from a function of their index):
//! splits handed out one per request, each read from its next number, with an optional rate
//! limit (the runtime's [`RateLimiter`]).

use crate::api::{
    Boundedness, ReaderContext, ReaderPoll, Source, SourceReader, SourceSplit, SplitEnumerator,
    SplitId,
};
use crate::coordinator::SplitEnumeratorContext;
use crate::error::SourceError;
use serde::{Deserialize, Serialize};
use sluice_core::{CheckpointId, Data, SubtaskIndex, UserError};
use sluice_runtime::api::RateLimiter;
use std::collections::VecDeque;
use std::task::{Context, Poll};

/// A range `next..=last` of a sequence, with the next number to read as its position.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SequenceSplit {
    /// The split's index in the sequence.
    pub index: u32,
    /// The next number to read.
    pub next: u64,
    /// The last number of the split (inclusive).
    pub last: u64,
}

impl SourceSplit for SequenceSplit {
    fn split_id(&self) -> SplitId {
        SplitId::from(self.index.to_string())
    }
}

/// Cuts `from..=to` into `n` contiguous splits (fewer if the range is shorter).
pub(crate) fn cut(from: u64, to: u64, n: usize) -> Vec<SequenceSplit> {
    if to < from {
        return Vec::new();
    }
    let len = u128::from(to - from) + 1;
    let n = (n.max(1) as u128).min(len);
    (0..n)
        .map(|i| {
            let start = from as u128 + len * i / n;
            let end = from as u128 + len * (i + 1) / n - 1;
            SequenceSplit {
                index: i as u32,
                next: start as u64,
                last: end as u64,
            }
        })
        .collect()
}

/// A sequence of numbers `first..=last`, each turned into a record by `f`, cut into one split
/// per subtask and read in order within each split, optionally rate-limited. Use it as a
/// [`NumberSequenceSource`] or a [`DataGeneratorSource`](crate::DataGeneratorSource).
#[derive(Clone)]
pub struct SequenceSource<F> {
    first: u64,
    last: Option<u64>,
    bounded: bool,
    f: F,
    rate: Option<f64>,
}

/// A source of the numbers `from..=to` (Flink's `NumberSequenceSource`).
///
/// ```
/// use sluice_runtime::prelude::*;
/// use sluice_source::{FromSource, NumberSequenceSource};
/// let env = StreamEnvironment::new();
/// let out = env.from_source(NumberSequenceSource::new(5, 9), None, "seq").collect();
/// env.execute_blocking("seq").unwrap();
/// let mut v = out.take();
/// v.sort();
/// assert_eq!(v, vec![5, 6, 7, 8, 9]);
/// ```
pub type NumberSequenceSource = SequenceSource<fn(u64) -> u64>;

impl NumberSequenceSource {
    /// The numbers `from..=to`. A descending range (`from > to`) is refused when the job is
    /// submitted, with [`SourceError::DescendingSequence`] naming both numbers (as Flink's
    /// constructor refuses it):
    ///
    /// ```
    /// use sluice_runtime::prelude::*;
    /// use sluice_source::{FromSource, NumberSequenceSource};
    /// let env = StreamEnvironment::new();
    /// env.from_source(NumberSequenceSource::new(10, 5), None, "seq").discard();
    /// let err = env.execute_blocking("seq").unwrap_err().to_string();
    /// assert!(err.contains("the sequence from 10 to 5 is descending"), "{err}");
    /// ```
    pub fn new(from: u64, to: u64) -> Self {
        SequenceSource {
            first: from,
            last: Some(to),
            bounded: true,
            f: identity,
            rate: None,
        }
    }
}

impl<F> SequenceSource<F> {
    pub(crate) fn generated(count: Option<u64>, f: F, rate: Option<f64>) -> Self {
        SequenceSource {
            first: 0,
            last: match count {
                Some(0) => None,
                Some(n) => Some(n - 1),
                None => Some(u64::MAX),
            },
            bounded: count.is_some(),
            f,
            rate,
        }
    }
}

impl<F> std::fmt::Debug for SequenceSource<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SequenceSource")
            .field("first", &self.first)
            .field("last", &self.last)
            .field("rate", &self.rate)
            .finish()
    }
}

impl<T: Data, F: Fn(u64) -> T + Clone + Send + Sync + 'static> Source for SequenceSource<F> {
    type Out = T;
    type Split = SequenceSplit;
    type Enumerator = SequenceEnumerator;
    type Reader = SequenceReader<T, F>;

    fn boundedness(&self) -> Boundedness {
        if self.bounded {
            Boundedness::Bounded
        } else {
            Boundedness::ContinuousUnbounded
        }
    }

    fn create_enumerator(
        &self,
        ctx: &SplitEnumeratorContext<SequenceEnumerator>,
    ) -> Result<SequenceEnumerator, UserError> {
        let splits = match self.last {
            Some(last) => cut(self.first, last, ctx.current_parallelism()),
            None => Vec::new(),
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
        Ok(SequenceReader::new(
            self.f.clone(),
            self.rate,
            ctx.parallelism(),
        ))
    }

    fn validate(&self) -> Result<(), UserError> {
        if let Some(last) = self.last
            && last < self.first
        {
            return Err(Box::new(SourceError::DescendingSequence {
                from: self.first,
                to: last,
            }));
        }
        match self.rate {
            Some(r) if !(r > 0.0 && r.is_finite()) => Err(format!(
                "rate limit {r} records per second: must be positive and finite"
            )
            .into()),
            _ => Ok(()),
        }
    }
}

fn identity(i: u64) -> u64 {
    i
}

/// Hands out its splits one per request; when none is left, tells the reader no more will come.
#[derive(Debug)]
pub struct SequenceEnumerator {
    remaining: VecDeque<SequenceSplit>,
}

impl SequenceEnumerator {
    pub(crate) fn new(splits: Vec<SequenceSplit>) -> Self {
        SequenceEnumerator {
            remaining: splits.into(),
        }
    }
}

impl SplitEnumerator for SequenceEnumerator {
    type Split = SequenceSplit;
    type Checkpoint = Vec<SequenceSplit>;

    fn handle_split_request(
        &mut self,
        ctx: &SplitEnumeratorContext<Self>,
        subtask: SubtaskIndex,
    ) -> Result<(), UserError> {
        match self.remaining.pop_front() {
            Some(split) => ctx.assign_split(subtask, vec![split])?,
            None => ctx.signal_no_more_splits(subtask)?,
        }
        Ok(())
    }

    fn add_splits_back(
        &mut self,
        _ctx: &SplitEnumeratorContext<Self>,
        splits: Vec<SequenceSplit>,
        _subtask: SubtaskIndex,
    ) -> Result<(), UserError> {
        for s in splits.into_iter().rev() {
            self.remaining.push_front(s);
        }
        Ok(())
    }

    fn add_reader(
        &mut self,
        _ctx: &SplitEnumeratorContext<Self>,
        _subtask: SubtaskIndex,
    ) -> Result<(), UserError> {
        Ok(()) // readers ask for splits themselves
    }

    fn snapshot_state(
        &mut self,
        _checkpoint: CheckpointId,
    ) -> Result<Vec<SequenceSplit>, UserError> {
        Ok(self.remaining.iter().cloned().collect())
    }
}

/// Reads sequence splits in order, turning each number into a record with `f`.
pub struct SequenceReader<T, F> {
    f: F,
    splits: VecDeque<SequenceSplit>,
    current: Option<(SplitId, SequenceSplit)>,
    rate: Option<RateLimiter>,
    _t: std::marker::PhantomData<fn() -> T>,
}

impl<T, F> SequenceReader<T, F> {
    /// A reader mapping numbers with `f`, limited to `rate` records per second over
    /// `parallelism` readers.
    pub(crate) fn new(f: F, rate: Option<f64>, parallelism: usize) -> Self {
        SequenceReader {
            f,
            splits: VecDeque::new(),
            current: None,
            rate: rate.map(|r| RateLimiter::new(r / parallelism.max(1) as f64)),
            _t: std::marker::PhantomData,
        }
    }
}

impl<T: Data, F: Fn(u64) -> T + Send + 'static> SourceReader for SequenceReader<T, F> {
    type Out = T;
    type Split = SequenceSplit;

    fn poll_next(
        &mut self,
        cx: &mut Context<'_>,
        max: usize,
    ) -> Poll<Result<ReaderPoll<T>, UserError>> {
        let Some((id, split)) = &mut self.current else {
            return match self.splits.pop_front() {
                Some(s) => {
                    self.current = Some((s.split_id(), s));
                    self.poll_next(cx, max)
                }
                None => Poll::Ready(Ok(ReaderPoll::NeedsSplits)),
            };
        };
        if split.next > split.last {
            let id = id.clone();
            self.current = None;
            return Poll::Ready(Ok(ReaderPoll::SplitFinished(id)));
        }
        let mut n = (split.last - split.next)
            .saturating_add(1)
            .min(max.max(1) as u64);
        if let Some(rate) = &mut self.rate {
            n = match rate.poll_admit(cx, n) {
                Poll::Ready(n) => n,
                Poll::Pending => return Poll::Pending,
            };
        }
        let start = split.next;
        let records: Vec<T> = (0..n).map(|k| (self.f)(start + k)).collect();
        let id = id.clone();
        match start.checked_add(n) {
            Some(next) => split.next = next,
            // The split ended at u64::MAX: its end is represented as an empty range.
            None => (split.next, split.last) = (u64::MAX, u64::MAX - 1),
        }
        Poll::Ready(Ok(ReaderPoll::Records { split: id, records }))
    }

    fn add_splits(&mut self, splits: Vec<SequenceSplit>) -> Result<(), UserError> {
        self.splits.extend(splits);
        Ok(())
    }

    fn snapshot_state(
        &mut self,
        _checkpoint: CheckpointId,
    ) -> Result<Vec<SequenceSplit>, UserError> {
        Ok(self
            .current
            .iter()
            .map(|(_, s)| s.clone())
            .chain(self.splits.iter().cloned())
            .collect())
    }
}

impl<T, F> std::fmt::Debug for SequenceReader<T, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SequenceReader")
            .field("current", &self.current)
            .field("queued", &self.splits.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn cut_covers_the_range_exactly_once(from in 0u64..1000, len in 0u64..1000, n in 1usize..9) {
            let to = from + len;
            let splits = cut(from, to, n);
            let numbers: Vec<u64> = splits.iter().flat_map(|s| s.next..=s.last).collect();
            prop_assert_eq!(numbers, (from..=to).collect::<Vec<_>>());
        }
    }

    fn poll(r: &mut SequenceReader<u64, fn(u64) -> u64>) -> Poll<Vec<u64>> {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match r.poll_next(&mut cx, 1_000) {
            Poll::Ready(Ok(ReaderPoll::Records { records, .. })) => Poll::Ready(records),
            Poll::Ready(other) => panic!("unexpected {other:?}"),
            Poll::Pending => Poll::Pending,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_rate_limit_lets_one_record_through_then_paces_the_rest() {
        let mut r: SequenceReader<u64, fn(u64) -> u64> =
            SequenceReader::new(identity, Some(20.0), 2);
        r.add_splits(cut(0, 1_000, 1)).unwrap();
        assert_eq!(poll(&mut r), Poll::Ready(vec![0]));
        assert_eq!(poll(&mut r), Poll::Pending);
        // 20 per second over 2 readers: 10 per second for this one.
        tokio::time::advance(std::time::Duration::from_secs(1)).await;
        assert_eq!(poll(&mut r), Poll::Ready((1..=10).collect()));
        assert_eq!(poll(&mut r), Poll::Pending);
    }

    #[test]
    fn a_split_ending_at_the_maximum_finishes() {
        let mut r: SequenceReader<u64, fn(u64) -> u64> = SequenceReader::new(identity, None, 1);
        r.add_splits(vec![SequenceSplit {
            index: 0,
            next: u64::MAX - 1,
            last: u64::MAX,
        }])
        .unwrap();
        assert_eq!(poll(&mut r), Poll::Ready(vec![u64::MAX - 1, u64::MAX]));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(matches!(
            r.poll_next(&mut cx, 10),
            Poll::Ready(Ok(ReaderPoll::SplitFinished(_)))
        ));
        assert!(matches!(
            r.poll_next(&mut cx, 10),
            Poll::Ready(Ok(ReaderPoll::NeedsSplits))
        ));
    }

    #[test]
    fn the_full_range_is_cut_without_overflow() {
        let splits = cut(0, u64::MAX, 2);
        assert_eq!(splits[0].next, 0);
        assert_eq!(splits[1].last, u64::MAX);
        assert_eq!(splits[0].last + 1, splits[1].next);
    }
}
