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
#[derive(Clone)]
pub(crate) struct FilterOp<F>(pub F);

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
        if let Some(mut ts) = out.take_input_timestamps() {
            let mut kept = 0;
            for i in 0..batch.len() {
                let keep = (self.0)(&batch[i]);
                batch.swap(kept, i);
                ts.swap(kept, i);
                kept += usize::from(keep);
            }
            batch.truncate(kept);
            ts.truncate(kept);
            out.emit_batch_at(batch, Some(ts));
            return Ok(());
        }
        if std::mem::size_of::<T>() <= 16 {
            // Branch-free compaction: on unpredictable predicates `retain`'s branch mispredicts
            // about one record in three, which costs more than moving small records
            // unconditionally. Kept records move forward in order; rejected ones gather behind
            // `kept` and are dropped by the truncation.
            let mut kept = 0;
            for i in 0..batch.len() {
                let keep = (self.0)(&batch[i]);
                batch.swap(kept, i);
                kept += usize::from(keep);
            }
            batch.truncate(kept);
        } else {
            batch.retain(&mut self.0);
        }
        out.emit_batch(batch);
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
