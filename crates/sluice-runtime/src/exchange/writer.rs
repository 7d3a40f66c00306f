//! The network writer: the last stage of a chain whose output crosses to another task.
//!
//! Records are routed into one buffer per target subtask; a buffer is sealed into a batch when it
//! is full, or when the task has nothing more ready (`flush_buffers`). Sealed batches wait in a
//! small queue until their channel has room; while that queue is not empty the task reads no
//! input, so memory stays bounded by one input batch's worth of output.

use super::ChannelSender;
use super::partitioner::Partitioner;
use crate::error::TaskError;
use crate::key_groups::{key_group, subtask_for_key_group};
use crate::operator::OperatorContext;
use crate::task::chain::{ChainStage, failure};
use crate::task::control::TaskSnapshot;
use sluice_core::{
    Batch, CheckpointBarrier, CheckpointId, Data, NO_TIMESTAMP, NodeId, OperatorEvent,
    StreamElement, Watermark, WatermarkStatus,
};
use std::collections::VecDeque;
use std::hash::Hash;
use std::task::{Context, Poll};
use tokio_util::sync::PollSender;

/// Per-target record buffers and the queue of sealed elements waiting for channel room.
///
/// Each target's buffer has a timestamp column beside it, filled lazily as the collector's is:
/// empty while no buffered record has an event time, so a job without event time never touches
/// it; otherwise padded with `NO_TIMESTAMP` for records that came without one.
pub(crate) struct Buffers<T> {
    bufs: Vec<Vec<T>>,
    ts: Vec<Vec<i64>>,
    batch_size: usize,
    ready: VecDeque<(usize, StreamElement<T>)>,
    /// A watermark that arrived while records were buffered: it waits for the next seal of all
    /// buffers instead of forcing partial batches out (delaying a watermark is always safe).
    pending_watermark: Option<Watermark>,
    /// The targets of the batch a custom partitioner is routing, reused from batch to batch.
    routed: Vec<usize>,
}

impl<T: Data> Buffers<T> {
    fn new(targets: usize, batch_size: usize) -> Self {
        Buffers {
            bufs: (0..targets).map(|_| Vec::new()).collect(),
            ts: (0..targets).map(|_| Vec::new()).collect(),
            batch_size: batch_size.max(1),
            ready: VecDeque::new(),
            pending_watermark: None,
            routed: Vec::new(),
        }
    }

    /// Number of targets.
    #[inline]
    pub(crate) fn targets(&self) -> usize {
        self.bufs.len()
    }

    /// Appends one record without an event time for `target`, sealing its buffer when full.
    #[inline]
    pub(crate) fn push(&mut self, target: usize, record: T) {
        let buf = &mut self.bufs[target];
        if buf.capacity() == 0 {
            buf.reserve_exact(self.batch_size);
        }
        buf.push(record);
        if buf.len() >= self.batch_size {
            self.full(target);
        }
    }

    /// Appends one record with its event time for `target`, sealing its buffer when full.
    #[inline]
    pub(crate) fn push_timed(&mut self, target: usize, record: T, timestamp: i64) {
        let buf = &mut self.bufs[target];
        if buf.capacity() == 0 {
            buf.reserve_exact(self.batch_size);
        }
        let ts = &mut self.ts[target];
        if ts.len() < buf.len() {
            ts.resize(buf.len(), NO_TIMESTAMP);
        }
        ts.push(timestamp);
        buf.push(record);
        if buf.len() >= self.batch_size {
            self.full(target);
        }
    }

    #[inline]
    fn full(&mut self, target: usize) {
        if self.pending_watermark.is_some() {
            self.seal_all();
        } else {
            self.seal(target);
        }
    }

    /// Hands a whole batch to `target`, without copying it when it is large enough on its own.
    #[inline]
    pub(crate) fn push_batch(&mut self, target: usize, batch: Batch<T>) {
        if self.bufs[target].is_empty() && batch.len() * 2 >= self.batch_size {
            self.ready
                .push_back((target, StreamElement::Records(batch)));
        } else {
            match batch.into_parts() {
                (records, None) => {
                    for r in records {
                        self.push(target, r);
                    }
                }
                (records, Some(ts)) => {
                    for (r, t) in records.into_iter().zip(ts) {
                        self.push_timed(target, r, t);
                    }
                }
            }
        }
    }

    fn seal(&mut self, target: usize) {
        if !self.bufs[target].is_empty() {
            let records = std::mem::take(&mut self.bufs[target]);
            let batch = if self.ts[target].is_empty() {
                Batch::new(records)
            } else {
                let mut ts = std::mem::take(&mut self.ts[target]);
                ts.resize(records.len(), NO_TIMESTAMP);
                Batch::with_timestamps(records, ts)
            };
            self.ready
                .push_back((target, StreamElement::Records(batch)));
        }
    }

    fn seal_all(&mut self) {
        for t in 0..self.bufs.len() {
            self.seal(t);
        }
        if let Some(w) = self.pending_watermark.take() {
            for t in 0..self.bufs.len() {
                self.ready.push_back((t, StreamElement::Watermark(w)));
            }
        }
    }

    /// Sends `w` behind everything buffered now: at once when nothing is buffered, otherwise
    /// with the next seal of all buffers.
    fn watermark(&mut self, w: Watermark) {
        if self.bufs.iter().all(Vec::is_empty) {
            self.broadcast(StreamElement::Watermark(w));
        } else {
            self.pending_watermark = Some(w);
        }
    }

    fn broadcast(&mut self, element: StreamElement<T>) {
        self.seal_all();
        for t in 0..self.bufs.len() {
            self.ready.push_back((t, element.clone()));
        }
    }
}

/// Routes the records of a batch into per-target buffers. A record and its event time always
/// go to the same target together.
pub(crate) trait Route<T>: Send + 'static {
    fn route(&mut self, batch: Batch<T>, out: &mut Buffers<T>) -> Result<(), String>;
}

/// Same subtask index downstream.
pub(crate) struct ForwardRoute {
    pub(crate) target: usize,
}

impl<T: Data> Route<T> for ForwardRoute {
    #[inline]
    fn route(&mut self, batch: Batch<T>, out: &mut Buffers<T>) -> Result<(), String> {
        out.push_batch(self.target, batch);
        Ok(())
    }
}

/// Round robin, record by record, starting at the producer's own index.
pub(crate) struct RebalanceRoute {
    pub(crate) next: usize,
}

impl RebalanceRoute {
    #[inline]
    fn next_target(&mut self, n: usize) -> usize {
        self.next = if self.next + 1 >= n { 0 } else { self.next + 1 };
        self.next
    }
}

impl<T: Data> Route<T> for RebalanceRoute {
    #[inline]
    fn route(&mut self, batch: Batch<T>, out: &mut Buffers<T>) -> Result<(), String> {
        let n = out.targets();
        if n == 1 {
            out.push_batch(0, batch);
            return Ok(());
        }
        match batch.into_parts() {
            (records, None) => {
                for r in records {
                    let t = self.next_target(n);
                    out.push(t, r);
                }
            }
            (records, Some(ts)) => {
                for (r, ts) in records.into_iter().zip(ts) {
                    let t = self.next_target(n);
                    out.push_timed(t, r, ts);
                }
            }
        }
        Ok(())
    }
}

/// By key group of the record's key.
pub(crate) struct HashRoute<F> {
    pub(crate) key_fn: F,
    pub(crate) max_parallelism: usize,
}

impl<T: Data, K: Hash, F: Fn(&T) -> K + Send + 'static> Route<T> for HashRoute<F> {
    #[inline]
    fn route(&mut self, batch: Batch<T>, out: &mut Buffers<T>) -> Result<(), String> {
        let n = out.targets();
        if n == 1 {
            out.push_batch(0, batch);
            return Ok(());
        }
        let target = |r: &T| {
            let g = key_group(&(self.key_fn)(r), self.max_parallelism);
            subtask_for_key_group(g, self.max_parallelism, n)
        };
        match batch.into_parts() {
            (records, None) => {
                for r in records {
                    out.push(target(&r), r);
                }
            }
            (records, Some(ts)) => {
                for (r, ts) in records.into_iter().zip(ts) {
                    out.push_timed(target(&r), r, ts);
                }
            }
        }
        Ok(())
    }
}

/// Every record to every subtask.
pub(crate) struct BroadcastRoute;

impl<T: Data> Route<T> for BroadcastRoute {
    fn route(&mut self, batch: Batch<T>, out: &mut Buffers<T>) -> Result<(), String> {
        let n = out.targets();
        for t in 0..n.saturating_sub(1) {
            out.push_batch(t, batch.clone());
        }
        if n > 0 {
            out.push_batch(n - 1, batch);
        }
        Ok(())
    }
}

/// A user [`Partitioner`], asked for a whole batch's targets at once
/// ([`Partitioner::partition_batch`]).
pub(crate) struct CustomRoute<P>(pub(crate) P);

impl<T: Data, P: Partitioner<T>> Route<T> for CustomRoute<P> {
    #[inline]
    fn route(&mut self, batch: Batch<T>, out: &mut Buffers<T>) -> Result<(), String> {
        let n = out.targets();
        let (records, ts) = batch.into_parts();
        let mut targets = std::mem::take(&mut out.routed);
        targets.clear();
        self.0.partition_batch(&records, n, &mut targets);
        if targets.len() != records.len() {
            return Err(format!(
                "the custom partitioner gave {} targets for a batch of {} records",
                targets.len(),
                records.len()
            ));
        }
        if let Some(i) = targets.iter().position(|&t| t >= n) {
            return Err(format!(
                "the custom partitioner chose subtask {} for record {:?}, but there are only {n}",
                targets[i], records[i]
            ));
        }
        for (i, (r, &t)) in records.into_iter().zip(&targets).enumerate() {
            match &ts {
                None => out.push(t, r),
                Some(ts) => out.push_timed(t, r, ts[i]),
            }
        }
        out.routed = targets;
        Ok(())
    }
}

/// The chain stage that writes to the network.
pub(crate) struct NetworkWriter<T: Data, R> {
    route: R,
    senders: Vec<PollSender<StreamElement<T>>>,
    buffers: Buffers<T>,
    producer: OperatorContext,
    ended: bool,
}

impl<T: Data, R: Route<T>> NetworkWriter<T, R> {
    pub(crate) fn new(
        route: R,
        senders: Vec<ChannelSender<T>>,
        batch_size: usize,
        producer: OperatorContext,
    ) -> Self {
        let buffers = Buffers::new(senders.len(), batch_size);
        NetworkWriter {
            route,
            senders: senders.into_iter().map(PollSender::new).collect(),
            buffers,
            producer,
            ended: false,
        }
    }
}

impl<T: Data, R: Route<T>> ChainStage<T> for NetworkWriter<T, R> {
    fn open(&mut self) -> Result<(), TaskError> {
        Ok(())
    }

    #[inline]
    fn process_batch(&mut self, batch: Batch<T>) -> Result<(), TaskError> {
        self.route
            .route(batch, &mut self.buffers)
            .map_err(|m| failure(&self.producer, m))
    }

    fn process_watermark(&mut self, w: Watermark) -> Result<(), TaskError> {
        self.buffers.watermark(w);
        Ok(())
    }

    fn process_status(&mut self, s: WatermarkStatus) -> Result<(), TaskError> {
        self.buffers.broadcast(StreamElement::Status(s));
        Ok(())
    }

    fn poll_work(&mut self, _cx: &mut Context<'_>) -> Result<bool, TaskError> {
        Ok(false)
    }

    fn input_blocked(&self) -> bool {
        false
    }

    fn flush_buffers(&mut self) {
        self.buffers.seal_all();
    }

    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), TaskError>> {
        while let Some(&(target, _)) = self.buffers.ready.front() {
            let sender = &mut self.senders[target];
            match sender.poll_reserve(cx) {
                Poll::Ready(Ok(())) => {
                    let Some((_, element)) = self.buffers.ready.pop_front() else {
                        break;
                    };
                    if sender.send_item(element).is_err() {
                        return Poll::Ready(Err(gone(&self.producer, target)));
                    }
                }
                Poll::Ready(Err(_)) => return Poll::Ready(Err(gone(&self.producer, target))),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }

    fn poll_finish(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), TaskError>> {
        if !self.ended {
            self.ended = true;
            self.buffers.broadcast(StreamElement::EndOfInput);
        }
        self.poll_flush(cx)
    }

    fn close(&mut self) -> Result<(), TaskError> {
        Ok(())
    }

    fn handle_event(&mut self, target: NodeId, _event: OperatorEvent) -> Result<(), TaskError> {
        Err(TaskError::Internal(format!(
            "an operator event for operator {target} reached a task that does not run it"
        )))
    }

    fn checkpoint(
        &mut self,
        barrier: CheckpointBarrier,
        _out: &mut TaskSnapshot,
    ) -> Result<(), TaskError> {
        // After end of input nobody reads the channels any more; a finished task's checkpoint
        // needs no barrier downstream (the consumers have finished too).
        if !self.ended {
            self.buffers.broadcast(StreamElement::Barrier(barrier));
        }
        Ok(())
    }

    fn notify_checkpoint(&mut self, _id: CheckpointId, _complete: bool) -> Result<(), TaskError> {
        Ok(())
    }
}

fn gone(producer: &OperatorContext, target: usize) -> TaskError {
    TaskError::PeerGone(format!(
        "{}: downstream subtask {target} closed its input",
        producer.describe()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_seal_when_full_and_keep_order() {
        let mut b = Buffers::<u32>::new(2, 3);
        for i in 0..7 {
            b.push((i % 2) as usize, i);
        }
        // target 0 got 0,2,4 (sealed), 6 pending; target 1 got 1,3,5 (sealed)
        assert_eq!(b.ready.len(), 2);
        b.seal_all();
        let got: Vec<_> = b.ready.drain(..).collect();
        assert_eq!(
            got,
            vec![
                (0, StreamElement::records(vec![0, 2, 4])),
                (1, StreamElement::records(vec![1, 3, 5])),
                (0, StreamElement::records(vec![6])),
            ]
        );
    }

    #[test]
    fn a_watermark_waits_behind_buffered_records_without_cutting_batches() {
        let mut b = Buffers::<u32>::new(2, 2);
        b.push(0, 1);
        b.watermark(Watermark::new(5));
        assert!(b.ready.is_empty(), "no partial batch is forced out");
        b.push(1, 2);
        b.push(0, 3); // target 0 fills: everything is sealed, then the watermark follows
        let got: Vec<_> = b.ready.drain(..).collect();
        assert_eq!(
            got,
            vec![
                (0, StreamElement::records(vec![1, 3])),
                (1, StreamElement::records(vec![2])),
                (0, StreamElement::Watermark(Watermark::new(5))),
                (1, StreamElement::Watermark(Watermark::new(5))),
            ]
        );
        // with nothing buffered it goes out at once
        b.watermark(Watermark::new(9));
        assert_eq!(b.ready.len(), 2);
    }

    #[test]
    fn rebalance_spreads_evenly() {
        let mut b = Buffers::<u32>::new(3, 1000);
        let mut r = RebalanceRoute { next: 0 };
        Route::route(&mut r, Batch::new((0..300).collect()), &mut b).unwrap();
        for t in 0..3 {
            assert_eq!(b.bufs[t].len(), 100);
        }
    }

    #[test]
    fn hash_routing_keeps_each_record_with_its_timestamp() {
        let mut b = Buffers::<u32>::new(3, 1000);
        let mut r = HashRoute {
            key_fn: |x: &u32| *x,
            max_parallelism: 128,
        };
        let records: Vec<u32> = (0..60).collect();
        let ts: Vec<i64> = records.iter().map(|x| i64::from(*x) * 10).collect();
        Route::route(&mut r, Batch::with_timestamps(records, ts), &mut b).unwrap();
        b.seal_all();
        let mut seen = 0;
        for (_, e) in b.ready.drain(..) {
            let StreamElement::Records(batch) = e else {
                continue;
            };
            for (rec, t) in batch.iter_timed() {
                assert_eq!(t, Some(i64::from(*rec) * 10));
                seen += 1;
            }
        }
        assert_eq!(seen, 60);
    }

    #[test]
    fn a_buffer_mixing_timed_and_plain_records_pads_with_the_marker() {
        let mut b = Buffers::<u32>::new(1, 10);
        b.push(0, 1);
        b.push_timed(0, 2, 20);
        b.push(0, 3);
        b.seal_all();
        let got: Vec<_> = b.ready.drain(..).collect();
        assert_eq!(
            got,
            vec![(
                0,
                StreamElement::Records(Batch::with_timestamps(
                    vec![1, 2, 3],
                    vec![NO_TIMESTAMP, 20, NO_TIMESTAMP]
                ))
            )]
        );
    }

    #[derive(Clone)]
    struct Bad;
    impl Partitioner<u32> for Bad {
        fn partition(&mut self, _r: &u32, n: usize) -> usize {
            n
        }
    }

    #[test]
    fn custom_partitioner_out_of_range_is_an_error_naming_the_record() {
        let mut b = Buffers::<u32>::new(2, 10);
        let err = Route::route(&mut CustomRoute(Bad), Batch::new(vec![42]), &mut b).unwrap_err();
        assert!(err.contains("subtask 2") && err.contains("42"), "{err}");
    }

    /// Routes by its own batch method: even records to 0, odd to 1, and counts its calls;
    /// `partition` alone would send everything to 1.
    struct ByBatch {
        batches: usize,
        short: bool,
    }
    impl Partitioner<u32> for ByBatch {
        fn partition(&mut self, _r: &u32, _n: usize) -> usize {
            1
        }
        fn partition_batch(&mut self, records: &[u32], _n: usize, out: &mut Vec<usize>) {
            self.batches += 1;
            let take = if self.short {
                records.len() - 1
            } else {
                records.len()
            };
            out.extend(records[..take].iter().map(|r| (*r % 2) as usize));
        }
    }

    #[test]
    fn a_custom_partitioner_is_asked_once_per_batch() {
        let mut b = Buffers::<u32>::new(2, 10);
        let mut route = CustomRoute(ByBatch {
            batches: 0,
            short: false,
        });
        let ts = vec![10, 11, 12, 13];
        Route::route(
            &mut route,
            Batch::with_timestamps(vec![0, 1, 2, 3], ts),
            &mut b,
        )
        .unwrap();
        assert_eq!(route.0.batches, 1);
        b.seal_all();
        let got: Vec<_> = b.ready.drain(..).collect();
        assert_eq!(
            got,
            vec![
                (
                    0,
                    StreamElement::Records(Batch::with_timestamps(vec![0, 2], vec![10, 12]))
                ),
                (
                    1,
                    StreamElement::Records(Batch::with_timestamps(vec![1, 3], vec![11, 13]))
                ),
            ]
        );
        let mut short = CustomRoute(ByBatch {
            batches: 0,
            short: true,
        });
        let err = Route::route(&mut short, Batch::new(vec![1, 2]), &mut b).unwrap_err();
        assert!(err.contains("1 targets for a batch of 2"), "{err}");
    }
}
