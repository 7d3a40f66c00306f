//! The built-in sources: a collection split across subtasks, and a generator.

use crate::operator::OperatorContext;
use crate::state::OperatorState;
use crate::task::input::SourceReader;
use sluice_core::codec;
use sluice_core::{Data, UserError};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// Reads its splits of a collection: contiguous index ranges.
///
/// A fresh subtask `s` of `p` owns one split, `[s*n/p, (s+1)*n/p)`. Its state is one entry per
/// split not yet read, with the position reached, so the restore deals the splits out over the
/// new subtasks: the collection may be restored at another parallelism, and a subtask given no
/// split reads nothing.
pub(crate) struct IterReader<T> {
    data: Arc<Vec<T>>,
    /// Unread `[from, to)` ranges, the current one first.
    splits: VecDeque<(u64, u64)>,
}

impl<T: Data + Sync> IterReader<T> {
    pub(crate) fn new(
        data: Arc<Vec<T>>,
        ctx: &OperatorContext,
        restored: Option<OperatorState>,
    ) -> Result<Self, UserError> {
        let n = data.len() as u64;
        let splits = match restored {
            Some(state) => {
                let splits = restored_splits(state)?;
                if let Some((from, to)) = splits.iter().find(|(f, t)| f > t || *t > n) {
                    return Err(format!(
                        "restored split {from}..{to} lies outside the collection of {n} elements"
                    )
                    .into());
                }
                splits
            }
            None => {
                let (s, p) = (ctx.subtask_index() as u64, ctx.parallelism() as u64);
                VecDeque::from([(s * n / p, (s + 1) * n / p)])
            }
        };
        Ok(IterReader { data, splits })
    }
}

/// The splits (pairs of indices) a source stored, one per state entry.
fn restored_splits(state: OperatorState) -> Result<VecDeque<(u64, u64)>, UserError> {
    state
        .entries()
        .iter()
        .map(|e| codec::decode::<(u64, u64)>(e).map_err(UserError::from))
        .collect()
}

/// One state entry per split.
fn split_state(splits: impl Iterator<Item = (u64, u64)>) -> Result<OperatorState, UserError> {
    let entries = splits
        .map(|s| codec::encode(&s).map_err(UserError::from))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(OperatorState::from_entries(entries))
}

impl<T: Data + Sync> SourceReader<T> for IterReader<T> {
    fn poll_next_batch(
        &mut self,
        _cx: &mut Context<'_>,
        max: usize,
    ) -> Poll<Result<Option<Vec<T>>, UserError>> {
        while let Some((from, to)) = self.splits.front_mut() {
            if *from >= *to {
                self.splits.pop_front();
                continue;
            }
            let end = (*from + max as u64).min(*to);
            // Indices were checked against the collection's length.
            let batch = self.data[*from as usize..end as usize].to_vec();
            *from = end;
            return Poll::Ready(Ok(Some(batch)));
        }
        Poll::Ready(Ok(None))
    }

    fn snapshot_state(&mut self) -> Result<OperatorState, UserError> {
        split_state(self.splits.iter().copied().filter(|(f, t)| f < t))
    }
}

/// A source that makes record `i` with a closure of `i`, for `i = 0, 1, 2, ...`.
///
/// Subtask `s` of `p` generates the indices `s, s + p, s + 2p, ...`, so the job as a whole
/// generates every index exactly once. Bounded with [`take`](Generator::take), unbounded by
/// default; [`rate_limit`](Generator::rate_limit) caps the records per second of the whole source.
///
/// Each such progression is a split: a subtask stores the next index of each of its splits, and
/// a restore deals the splits out over the new subtasks, so a generator may be restored at
/// another parallelism (a subtask then alternates between its splits, and one given no split
/// generates nothing).
///
/// ```
/// use sluice_runtime::prelude::*;
/// let env = StreamEnvironment::new();
/// let out = env.from_generator(Generator::new(|i| i * 10).take(5)).collect();
/// env.execute_blocking("gen").unwrap();
/// let mut v = out.take();
/// v.sort();
/// assert_eq!(v, vec![0, 10, 20, 30, 40]);
/// ```
#[derive(Clone)]
pub struct Generator<F> {
    pub(crate) f: F,
    pub(crate) count: Option<u64>,
    pub(crate) rate: Option<f64>,
}

impl<T: Data, F: Fn(u64) -> T + Clone + Send + Sync + 'static> Generator<F> {
    /// An unbounded generator of `f(0), f(1), ...`.
    pub fn new(f: F) -> Self {
        Generator {
            f,
            count: None,
            rate: None,
        }
    }

    /// Stops after `n` records in total.
    pub fn take(mut self, n: u64) -> Self {
        self.count = Some(n);
        self
    }

    /// At most `records_per_second` records per second over all subtasks.
    pub fn rate_limit(mut self, records_per_second: f64) -> Self {
        self.rate = Some(records_per_second);
        self
    }

    /// The configured total, if bounded.
    pub fn count(&self) -> Option<u64> {
        self.count
    }

    /// The configured rate limit (records per second over all subtasks), if any.
    pub fn rate(&self) -> Option<f64> {
        self.rate
    }

    /// The record function.
    pub fn function(&self) -> &F {
        &self.f
    }
}

/// Paces a reader to `per_second` records per second: one record may go at once, then one per
/// `1 / per_second`, on tokio's clock (so a paused test clock drives it). Shared by the
/// generator here and the split sources of `sluice-source`.
///
/// ```
/// use sluice_runtime::api::RateLimiter;
/// use std::task::{Context, Poll, Waker};
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap().block_on(async {
/// let mut limit = RateLimiter::new(10.0);
/// let mut cx = Context::from_waker(Waker::noop());
/// assert_eq!(limit.poll_admit(&mut cx, 100), Poll::Ready(1));
/// assert_eq!(limit.poll_admit(&mut cx, 100), Poll::Pending);
/// tokio::time::advance(std::time::Duration::from_secs(1)).await;
/// assert_eq!(limit.poll_admit(&mut cx, 100), Poll::Ready(10));
/// # });
/// ```
pub struct RateLimiter {
    per_second: f64,
    start: Instant,
    produced: u64,
    sleep: Pin<Box<Sleep>>,
}

impl RateLimiter {
    /// A limiter starting now (a rate below the smallest positive float is raised to it).
    pub fn new(per_second: f64) -> Self {
        let now = Instant::now();
        RateLimiter {
            per_second: per_second.max(f64::MIN_POSITIVE),
            start: now,
            produced: 0,
            sleep: Box::pin(tokio::time::sleep_until(now)),
        }
    }

    /// How many of `want` records may go now (at least one), counted as produced; `Pending`
    /// when none may, with `cx` woken when one may.
    pub fn poll_admit(&mut self, cx: &mut Context<'_>, want: u64) -> Poll<u64> {
        let elapsed = self.start.elapsed().as_secs_f64();
        let allowed = (elapsed * self.per_second) as u64 + 1;
        if allowed <= self.produced {
            let wait = self.produced as f64 / self.per_second;
            self.sleep
                .as_mut()
                .reset(self.start + Duration::from_secs_f64(wait));
            if self.sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
        let n = want.min(allowed.saturating_sub(self.produced).max(1));
        self.produced += n;
        Poll::Ready(n)
    }
}

impl std::fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimiter")
            .field("per_second", &self.per_second)
            .field("produced", &self.produced)
            .finish()
    }
}

/// One subtask's splits of a [`Generator`]: arithmetic progressions of indices.
pub(crate) struct GeneratorReader<F> {
    f: F,
    /// `(next, stride)` of each split.
    splits: Vec<(u64, u64)>,
    /// The split the next batch comes from.
    current: usize,
    end: Option<u64>,
    rate: Option<RateLimiter>,
}

impl<T: Data, F: Fn(u64) -> T + Clone + Send + Sync + 'static> GeneratorReader<F> {
    pub(crate) fn new(
        g: &Generator<F>,
        ctx: &OperatorContext,
        restored: Option<OperatorState>,
    ) -> Result<Self, UserError> {
        let p = ctx.parallelism() as u64;
        let s = ctx.subtask_index() as u64;
        let splits = match restored {
            Some(state) => {
                let splits: Vec<(u64, u64)> = restored_splits(state)?.into();
                if let Some((next, _)) = splits.iter().find(|(_, stride)| *stride == 0) {
                    return Err(
                        format!("restored generator split at index {next} has stride 0").into(),
                    );
                }
                splits
            }
            None => vec![(s, p)],
        };
        Ok(GeneratorReader {
            f: g.f.clone(),
            splits,
            current: 0,
            end: g.count,
            rate: g.rate.map(|r| RateLimiter::new(r / p as f64)),
        })
    }
}

impl<T: Data, F: Fn(u64) -> T + Clone + Send + Sync + 'static> SourceReader<T>
    for GeneratorReader<F>
{
    fn poll_next_batch(
        &mut self,
        cx: &mut Context<'_>,
        max: usize,
    ) -> Poll<Result<Option<Vec<T>>, UserError>> {
        if let Some(end) = self.end {
            self.splits.retain(|(next, _)| *next < end);
        }
        if self.splits.is_empty() {
            return Poll::Ready(Ok(None));
        }
        if self.current >= self.splits.len() {
            self.current = 0;
        }
        let (start, stride) = self.splits[self.current];
        let mut n = max as u64;
        if let Some(end) = self.end {
            n = n.min((end - start).div_ceil(stride));
        }
        if let Some(rl) = &mut self.rate {
            n = match rl.poll_admit(cx, n) {
                Poll::Ready(n) => n,
                Poll::Pending => return Poll::Pending,
            };
        }
        let f = &self.f;
        let batch: Vec<T> = (0..n).map(|k| f(start + k * stride)).collect();
        self.splits[self.current].0 = start + n * stride;
        self.current += 1;
        Poll::Ready(Ok(Some(batch)))
    }

    fn snapshot_state(&mut self) -> Result<OperatorState, UserError> {
        let end = self.end.unwrap_or(u64::MAX);
        split_state(self.splits.iter().copied().filter(|(next, _)| *next < end))
    }
}
