//! The built-in stateless operators behind `map`, `filter`, `flat_map` and `union` (the
//! operator behind sinks, `SinkOp`, lives beside the `Sink` trait in `api/sink.rs`).
//!
//! Each applies its closure to a whole batch in one monomorphised loop: the per-batch dynamic call
//! into the operator is the only indirection a record pays. Each keeps every input's event time on
//! what it produced (the column is moved, or compacted beside the records); a batch without event
//! times takes the same loops as before timestamps existed.

use super::{Collector, Operator};
use sluice_core::{Data, UserError};
use std::marker::PhantomData;

/// `map`: one output per input.
#[derive(Clone)]
pub(crate) struct MapOp<F>(pub F);

impl<In: Data, Out: Data, F> Operator<In> for MapOp<F>
where
    F: FnMut(In) -> Out + Clone + Send + 'static,
{
    type Out = Out;
    #[inline]
    fn process_batch(&mut self, batch: Vec<In>, out: &mut Collector<Out>) -> Result<(), UserError> {
        let timestamps = out.take_input_timestamps();
        out.emit_batch_at(batch.into_iter().map(&mut self.0).collect(), timestamps);
        Ok(())
    }
}

/// `filter`: keeps the records the predicate accepts, in place.
///
/// The compaction is branch-free for small records: on an unpredictable predicate a branch per
/// record mispredicts often enough to cost more than moving every record unconditionally. For
/// records without drop glue (`u64`, tuples of numbers, ...) it only writes: each kept record is
/// copied to the next kept slot through `Clone` (for such types a bitwise copy in practice) and
/// the tail is truncated, so no record is dropped twice and nothing needs swapping back.
#[derive(Clone)]
pub(crate) struct FilterOp<F>(pub F);

/// Records up to this size are compacted branch-free; larger ones go through `Vec::retain`.
const BRANCH_FREE_MAX_SIZE: usize = 16;

impl<F> FilterOp<F> {
    /// Compacts `batch` (and `ts` beside it) to the records the predicate keeps.
    #[inline]
    fn compact<T: Clone>(&mut self, batch: &mut Vec<T>, ts: Option<&mut Vec<i64>>)
    where
        F: FnMut(&T) -> bool,
    {
        let small = std::mem::size_of::<T>() <= BRANCH_FREE_MAX_SIZE;
        let kept = match ts {
            Some(ts) if !std::mem::needs_drop::<T>() => {
                let mut kept = 0;
                for i in 0..batch.len() {
                    let record = batch[i].clone();
                    let keep = (self.0)(&record);
                    batch[kept] = record;
                    ts[kept] = ts[i];
                    kept += usize::from(keep);
                }
                ts.truncate(kept);
                kept
            }
            Some(ts) => {
                let mut kept = 0;
                for i in 0..batch.len() {
                    let keep = (self.0)(&batch[i]);
                    batch.swap(kept, i);
                    ts[kept] = ts[i];
                    kept += usize::from(keep);
                }
                ts.truncate(kept);
                kept
            }
            None if small && !std::mem::needs_drop::<T>() => {
                // Write-only: the kept record lands in slot `kept`; whatever was there (a
                // rejected record, or an earlier copy of a kept one) is overwritten, which is
                // sound because such records own nothing.
                let mut kept = 0;
                for i in 0..batch.len() {
                    let record = batch[i].clone();
                    let keep = (self.0)(&record);
                    batch[kept] = record;
                    kept += usize::from(keep);
                }
                kept
            }
            None if small => {
                // Kept records move forward in order; rejected ones gather behind `kept` and
                // are dropped by the truncation.
                let mut kept = 0;
                for i in 0..batch.len() {
                    let keep = (self.0)(&batch[i]);
                    batch.swap(kept, i);
                    kept += usize::from(keep);
                }
                kept
            }
            None => {
                batch.retain(&mut self.0);
                batch.len()
            }
        };
        batch.truncate(kept);
    }
}

impl<T: Data, F> Operator<T> for FilterOp<F>
where
    F: FnMut(&T) -> bool + Clone + Send + 'static,
{
    type Out = T;
    #[inline]
    fn process_batch(
        &mut self,
        mut batch: Vec<T>,
        out: &mut Collector<T>,
    ) -> Result<(), UserError> {
        let mut ts = out.take_input_timestamps();
        self.compact(&mut batch, ts.as_mut());
        out.emit_batch_at(batch, ts);
        Ok(())
    }
}

/// `flat_map`: any number of outputs per input.
#[derive(Clone)]
pub(crate) struct FlatMapOp<F, Out>(pub F, pub PhantomData<fn() -> Out>);

impl<In: Data, Out: Data, I, F> Operator<In> for FlatMapOp<F, Out>
where
    I: IntoIterator<Item = Out>,
    F: FnMut(In) -> I + Clone + Send + 'static,
{
    type Out = Out;
    #[inline]
    fn process_batch(&mut self, batch: Vec<In>, out: &mut Collector<Out>) -> Result<(), UserError> {
        match out.take_input_timestamps() {
            None => {
                for record in batch {
                    for o in (self.0)(record) {
                        out.collect(o);
                    }
                }
            }
            Some(ts) => {
                for (record, t) in batch.into_iter().zip(ts) {
                    for o in (self.0)(record) {
                        out.collect_at(o, t);
                    }
                }
            }
        }
        Ok(())
    }
}

/// Passes everything through; used where several streams are unioned into one.
pub(crate) struct IdentityOp<T>(pub PhantomData<fn() -> T>);

impl<T> Clone for IdentityOp<T> {
    fn clone(&self) -> Self {
        IdentityOp(PhantomData)
    }
}

impl<T: Data> Operator<T> for IdentityOp<T> {
    type Out = T;
    #[inline]
    fn process_batch(&mut self, batch: Vec<T>, out: &mut Collector<T>) -> Result<(), UserError> {
        out.forward_batch(batch);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use sluice_core::{Batch, StreamElement};

    /// Runs `op` on `records` (with `timestamps` as the input's event times) and returns the one
    /// batch it emitted, or an empty one.
    fn run<T: Data, O: Operator<T, Out = T>>(
        op: &mut O,
        records: Vec<T>,
        timestamps: Option<Vec<i64>>,
    ) -> Batch<T> {
        let mut out = Collector::new();
        out.set_input_timestamps(timestamps);
        op.process_batch(records, &mut out).unwrap();
        let mut batches: Vec<Batch<T>> = out
            .take_elements()
            .into_iter()
            .filter_map(|e| match e {
                StreamElement::Records(b) => Some(b),
                _ => None,
            })
            .collect();
        assert!(batches.len() <= 1, "one batch in, at most one batch out");
        batches.pop().unwrap_or_else(|| Batch::new(Vec::new()))
    }

    /// What `filter` must do: the records the predicate accepts, in order, each with its time.
    fn model<T: Clone>(records: &[T], ts: Option<&[i64]>, keep: impl Fn(&T) -> bool) -> Batch<T> {
        let kept: Vec<usize> = (0..records.len()).filter(|&i| keep(&records[i])).collect();
        Batch::from_parts(
            kept.iter().map(|&i| records[i].clone()).collect(),
            ts.map(|ts| kept.iter().map(|&i| ts[i]).collect()),
        )
    }

    proptest! {
        /// Every compaction path (small records without drop glue, small owning records, large
        /// records; with and without event times) keeps exactly the accepted records in order,
        /// with their timestamps.
        #[test]
        fn filter_keeps_accepted_records_in_order_with_their_times(
            values in proptest::collection::vec(any::<u64>(), 1..300),
            timed in any::<bool>(),
            modulus in 1u64..5,
        ) {
            let ts: Option<Vec<i64>> = timed.then(|| (0..values.len() as i64).map(|i| i * 7 - 3).collect());
            let keep = move |x: &u64| !x.is_multiple_of(modulus);

            let mut op = FilterOp(keep);
            let got = run(&mut op, values.clone(), ts.clone());
            let want = model(&values, ts.as_deref(), keep);
            prop_assert_eq!(got.records(), want.records());
            prop_assert_eq!(got.timestamps().unwrap_or(&[]), want.timestamps().unwrap_or(&[]));

            let strings: Vec<String> = values.iter().map(u64::to_string).collect();
            let skeep = move |s: &String| s.parse::<u64>().is_ok_and(|x| !x.is_multiple_of(modulus));
            let mut op = FilterOp(skeep);
            let got = run(&mut op, strings.clone(), ts.clone());
            let want = model(&strings, ts.as_deref(), skeep);
            prop_assert_eq!(got.records(), want.records());
            prop_assert_eq!(got.timestamps().unwrap_or(&[]), want.timestamps().unwrap_or(&[]));

            let large: Vec<[u64; 4]> = values.iter().map(|&x| [x, x, x, x]).collect();
            let lkeep = move |a: &[u64; 4]| !a[0].is_multiple_of(modulus);
            let mut op = FilterOp(lkeep);
            let got = run(&mut op, large.clone(), ts.clone());
            let want = model(&large, ts.as_deref(), lkeep);
            prop_assert_eq!(got.records(), want.records());
            prop_assert_eq!(got.timestamps().unwrap_or(&[]), want.timestamps().unwrap_or(&[]));
        }
    }

    /// Owning records are each dropped exactly once: the rejected ones by the truncation, the
    /// kept ones by whoever receives them.
    #[test]
    fn filter_drops_each_owning_record_once() {
        use std::sync::Arc;
        let shared = Arc::new(());
        let records: Vec<(u64, Arc<()>)> = (0..10).map(|i| (i, shared.clone())).collect();
        let mut op = FilterOp(|r: &(u64, Arc<()>)| !r.0.is_multiple_of(3));
        let got = run(&mut op, records, None);
        assert_eq!(got.len(), 6);
        assert_eq!(Arc::strong_count(&shared), 7);
        drop(got);
        assert_eq!(Arc::strong_count(&shared), 1);
    }
}
