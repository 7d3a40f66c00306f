//! Exactly-once sinks: [`TwoPhaseCommitSink`] and the operator that drives it from checkpoints.
//!
//! Records go into the sink's current transaction. At a checkpoint barrier the transaction is
//! pre-committed (made durable but not visible), stored in the checkpoint, and a new one begins.
//! When the checkpoint completes everywhere, the pre-committed transactions are committed (made
//! visible). After a failure the job restarts from the last completed checkpoint: its
//! pre-committed transactions are committed (restoring implies the checkpoint completed), and its
//! open transaction is aborted, because the records in it are replayed. So every record becomes
//! visible exactly once, whatever fails and whenever.

use crate::operator::{Collector, Operator, OperatorContext};
use crate::state::OperatorState;
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use sluice_core::{CheckpointId, Data, UserError, codec};
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::marker::PhantomData;

/// A sink that writes in transactions and takes part in checkpoints (Flink's
/// `TwoPhaseCommitSinkFunction`).
///
/// `commit` and `abort` must be idempotent: after a failure they may be called again for a
/// transaction that was already committed or aborted. One instance runs per subtask.
///
/// ```
/// use sluice_runtime::prelude::*;
/// use sluice_runtime::api::TwoPhaseCommitSink;
/// use sluice_core::CheckpointId;
/// use std::sync::{Arc, Mutex};
///
/// /// Keeps committed records in memory (a stand-in for a transactional store).
/// #[derive(Clone, Default)]
/// struct Memory(Arc<Mutex<Vec<u64>>>);
///
/// impl TwoPhaseCommitSink<u64> for Memory {
///     type Transaction = Vec<u64>;
///     fn begin_transaction(&mut self) -> Result<Vec<u64>, UserError> { Ok(Vec::new()) }
///     fn write(&mut self, txn: &mut Vec<u64>, batch: Vec<u64>) -> Result<(), UserError> {
///         txn.extend(batch);
///         Ok(())
///     }
///     fn pre_commit(&mut self, _txn: &mut Vec<u64>) -> Result<(), UserError> { Ok(()) }
///     fn commit(&mut self, txn: Vec<u64>, _at: Option<CheckpointId>) -> Result<(), UserError> {
///         self.0.lock().unwrap().extend(txn);
///         Ok(())
///     }
///     fn abort(&mut self, _txn: Vec<u64>) -> Result<(), UserError> { Ok(()) }
/// }
///
/// let committed = Memory::default();
/// let env = StreamEnvironment::new();
/// env.from_iter(0u64..100).sink_to_exactly_once(committed.clone());
/// env.execute_blocking("two-phase").unwrap();
/// assert_eq!(committed.0.lock().unwrap().len(), 100);
/// ```
pub trait TwoPhaseCommitSink<T>: Send + 'static {
    /// What identifies a transaction; stored in checkpoints.
    type Transaction: Serialize + DeserializeOwned + Debug + Send + 'static;

    /// Checks the sink's configuration against the job's checkpointing at submit time (`None`
    /// when checkpointing is off; a transaction timeout shorter than the checkpoint interval, for
    /// example): an error refuses the job before it runs, naming the sink.
    fn validate(
        &self,
        checkpoints: Option<&crate::checkpoint::CheckpointSettings>,
    ) -> Result<(), UserError> {
        let _ = checkpoints;
        Ok(())
    }

    /// Called once before anything else (and before [`recover`](Self::recover)).
    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        let _ = ctx;
        Ok(())
    }
    /// Starts a new transaction.
    fn begin_transaction(&mut self) -> Result<Self::Transaction, UserError>;
    /// Writes a batch into `txn`.
    fn write(&mut self, txn: &mut Self::Transaction, batch: Vec<T>) -> Result<(), UserError>;
    /// Makes `txn` durable, ready to commit; no more writes follow.
    fn pre_commit(&mut self, txn: &mut Self::Transaction) -> Result<(), UserError>;
    /// Makes a pre-committed `txn` visible. Idempotent.
    ///
    /// `checkpoint` is the checkpoint whose barrier pre-committed `txn` (`None` at the end of a
    /// bounded input without checkpointing). When a checkpoint completes, the transactions of
    /// every checkpoint up to it that are still pending (those whose completion was not notified
    /// come along) are committed one by one, oldest first, and an error stops there: a sink whose
    /// commits must stay in checkpoint order (a table recording its highest committed checkpoint)
    /// can rely on it. Every checkpoint has a transaction, empty when no record arrived.
    fn commit(
        &mut self,
        txn: Self::Transaction,
        checkpoint: Option<CheckpointId>,
    ) -> Result<(), UserError>;
    /// Discards `txn`. Idempotent.
    fn abort(&mut self, txn: Self::Transaction) -> Result<(), UserError>;
    /// Settles what a restored checkpoint holds, after [`open`](Self::open) and before any new
    /// transaction. Restoring implies the checkpoint completed, so its pending transactions must
    /// become visible; its open ones must be discarded, because their records are replayed.
    ///
    /// By default it commits each pending transaction, oldest first, then aborts the open ones.
    /// A sink that can ask its target what is already committed overrides it to skip that.
    fn recover(&mut self, restored: Restored<Self::Transaction>) -> Result<(), UserError> {
        for (checkpoint, txn) in restored.pending {
            self.commit(txn, Some(checkpoint))?;
        }
        for txn in restored.open {
            self.abort(txn)?;
        }
        Ok(())
    }
    /// Releases resources.
    fn close(&mut self) -> Result<(), UserError> {
        Ok(())
    }
}

/// What a restored checkpoint holds for a [`TwoPhaseCommitSink`] (for a sink whose subtasks were
/// rescaled, what all the old subtasks held).
#[derive(Debug)]
pub struct Restored<X> {
    /// The pre-committed transactions not yet known to be committed, each with the checkpoint
    /// that pre-committed it, oldest checkpoint first (several per checkpoint when several old
    /// subtasks' states are merged).
    pub pending: Vec<(CheckpointId, X)>,
    /// The transactions that were open when the checkpoint was taken.
    pub open: Vec<X>,
}

impl<X> Restored<X> {
    /// Merges the states of the old subtasks, in checkpoint order (stable: one subtask's
    /// transactions of a checkpoint keep their order).
    fn merge(stored: impl IntoIterator<Item = Stored<X>>) -> Self {
        let mut pending = Vec::new();
        let mut open = Vec::new();
        for s in stored {
            pending.extend(s.pending.into_iter().map(|(c, x)| (CheckpointId(c), x)));
            open.extend(s.current);
        }
        pending.sort_by_key(|(c, _)| *c);
        Restored { pending, open }
    }
}

/// What one subtask stores at a checkpoint.
#[derive(Serialize, Deserialize)]
#[serde(bound = "X: Serialize + DeserializeOwned")]
struct Stored<X> {
    pending: Vec<(u64, X)>,
    current: Option<X>,
}

/// [`Stored`] by reference, for encoding without cloning (postcard encodes `&X` as `X`).
#[derive(Serialize)]
struct StoredRef<'a, X: Serialize> {
    pending: Vec<(u64, &'a X)>,
    current: Option<&'a X>,
}

/// The operator that drives a [`TwoPhaseCommitSink`] from checkpoints:
/// [`DataStream::sink_to_exactly_once`](crate::api::DataStream::sink_to_exactly_once) puts it in
/// the job graph. Public so that a sink can be tested through the operator test harness.
pub struct TwoPhaseCommitOp<T, S: TwoPhaseCommitSink<T>> {
    sink: S,
    current: Option<S::Transaction>,
    pending: BTreeMap<u64, S::Transaction>,
    restored: Vec<Vec<u8>>,
    checkpointing: bool,
    _t: PhantomData<fn(T)>,
}

impl<T, S: TwoPhaseCommitSink<T> + Clone> Clone for TwoPhaseCommitOp<T, S> {
    fn clone(&self) -> Self {
        TwoPhaseCommitOp::new(self.sink.clone())
    }
}

impl<T, S: TwoPhaseCommitSink<T>> TwoPhaseCommitOp<T, S> {
    /// The operator for `sink`.
    pub fn new(sink: S) -> Self {
        TwoPhaseCommitOp {
            sink,
            current: None,
            pending: BTreeMap::new(),
            restored: Vec::new(),
            checkpointing: false,
            _t: PhantomData,
        }
    }

    /// The sink it drives.
    pub fn sink(&self) -> &S {
        &self.sink
    }

    fn ensure_current(&mut self) -> Result<(), UserError> {
        if self.current.is_none() {
            self.current = Some(self.sink.begin_transaction()?);
        }
        Ok(())
    }
}

impl<T: Data, S: TwoPhaseCommitSink<T>> Operator<T> for TwoPhaseCommitOp<T, S> {
    type Out = ();

    fn initialize_state(&mut self, state: OperatorState) -> Result<(), UserError> {
        self.restored = state.into_entries();
        Ok(())
    }

    fn validate(
        &self,
        checkpoints: Option<&crate::checkpoint::CheckpointSettings>,
    ) -> Result<(), UserError> {
        self.sink.validate(checkpoints)
    }

    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.checkpointing = ctx.checkpointing_enabled();
        self.sink.open(ctx)?;
        let restored = std::mem::take(&mut self.restored);
        if restored.is_empty() {
            return Ok(());
        }
        let stored = restored
            .iter()
            .map(|entry| codec::decode::<Stored<S::Transaction>>(entry))
            .collect::<Result<Vec<_>, _>>()?;
        self.sink.recover(Restored::merge(stored))
    }

    fn process_batch(&mut self, batch: Vec<T>, _out: &mut Collector<()>) -> Result<(), UserError> {
        self.ensure_current()?;
        match self.current.as_mut() {
            Some(txn) => self.sink.write(txn, batch),
            None => Err("no open transaction".into()),
        }
    }

    fn process_watermark(
        &mut self,
        _w: sluice_core::Watermark,
        _out: &mut Collector<()>,
    ) -> Result<(), UserError> {
        Ok(())
    }

    fn end_input(&mut self, _out: &mut Collector<()>) -> Result<(), UserError> {
        if !self.checkpointing
            && let Some(mut txn) = self.current.take()
        {
            // Without checkpoints nothing else will commit: do it now (no exactly-once then).
            self.sink.pre_commit(&mut txn)?;
            self.sink.commit(txn, None)?;
        }
        Ok(())
    }

    fn snapshot_state(
        &mut self,
        checkpoint: CheckpointId,
        _out: &mut Collector<()>,
    ) -> Result<OperatorState, UserError> {
        self.ensure_current()?;
        if let Some(mut txn) = self.current.take() {
            self.sink.pre_commit(&mut txn)?;
            self.pending.insert(checkpoint.0, txn);
        }
        self.current = Some(self.sink.begin_transaction()?);
        let stored = StoredRef {
            pending: self.pending.iter().map(|(id, t)| (*id, t)).collect(),
            current: self.current.as_ref(),
        };
        Ok(OperatorState::from_entries(vec![codec::encode(&stored)?]))
    }

    fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> Result<(), UserError> {
        // Oldest first, stopping at an error: what follows stays pending, in order.
        while let Some(entry) = self.pending.first_entry() {
            if *entry.key() > checkpoint.0 {
                break;
            }
            let (id, txn) = entry.remove_entry();
            self.sink.commit(txn, Some(CheckpointId(id)))?;
        }
        Ok(())
    }

    fn close(&mut self) -> Result<(), UserError> {
        if let Some(txn) = self.current.take() {
            self.sink.abort(txn)?;
        }
        self.sink.close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::OperatorTestHarness;
    use std::sync::{Arc, Mutex};

    /// What the sink was asked to do, in order.
    #[derive(Clone, Debug, PartialEq, Eq)]
    enum Call {
        Commit(Vec<u64>, Option<u64>),
        Abort(Vec<u64>),
    }

    /// Records its calls; fails the commit of checkpoint `fail_at` once.
    #[derive(Clone, Default)]
    struct Recording {
        calls: Arc<Mutex<Vec<Call>>>,
        fail_at: Arc<Mutex<Option<u64>>>,
    }

    impl Recording {
        fn take(&self) -> Vec<Call> {
            std::mem::take(&mut self.calls.lock().unwrap())
        }
    }

    impl TwoPhaseCommitSink<u64> for Recording {
        type Transaction = Vec<u64>;
        fn begin_transaction(&mut self) -> Result<Vec<u64>, UserError> {
            Ok(Vec::new())
        }
        fn write(&mut self, txn: &mut Vec<u64>, batch: Vec<u64>) -> Result<(), UserError> {
            txn.extend(batch);
            Ok(())
        }
        fn pre_commit(&mut self, _txn: &mut Vec<u64>) -> Result<(), UserError> {
            Ok(())
        }
        fn commit(&mut self, txn: Vec<u64>, at: Option<CheckpointId>) -> Result<(), UserError> {
            let at = at.map(|c| c.0);
            let mut fail = self.fail_at.lock().unwrap();
            if at.is_some() && *fail == at {
                *fail = None;
                return Err(format!("commit of checkpoint {at:?} failed").into());
            }
            self.calls.lock().unwrap().push(Call::Commit(txn, at));
            Ok(())
        }
        fn abort(&mut self, txn: Vec<u64>) -> Result<(), UserError> {
            self.calls.lock().unwrap().push(Call::Abort(txn));
            Ok(())
        }
    }

    fn harness(sink: &Recording) -> OperatorTestHarness<u64, TwoPhaseCommitOp<u64, Recording>> {
        OperatorTestHarness::new(TwoPhaseCommitOp::new(sink.clone()))
    }

    #[test]
    fn a_completed_checkpoint_commits_every_pending_one_up_to_it_oldest_first() {
        let sink = Recording::default();
        let mut op = harness(&sink);
        op.open().unwrap();
        op.process_batch(vec![1, 2]).unwrap();
        op.snapshot(1).unwrap();
        op.snapshot(2).unwrap(); // no records: an empty transaction
        op.process_batch(vec![3]).unwrap();
        op.snapshot(3).unwrap();
        op.process_batch(vec![4]).unwrap();
        op.snapshot(4).unwrap();
        op.notify_checkpoint_complete(3).unwrap();
        assert_eq!(
            sink.take(),
            vec![
                Call::Commit(vec![1, 2], Some(1)),
                Call::Commit(vec![], Some(2)),
                Call::Commit(vec![3], Some(3)),
            ]
        );
        // A late notification of an older checkpoint commits nothing twice.
        op.notify_checkpoint_complete(2).unwrap();
        assert_eq!(sink.take(), vec![]);
        op.notify_checkpoint_complete(4).unwrap();
        assert_eq!(sink.take(), vec![Call::Commit(vec![4], Some(4))]);
    }

    #[test]
    fn a_failed_commit_stops_there_and_leaves_the_later_checkpoints_pending() {
        let sink = Recording::default();
        *sink.fail_at.lock().unwrap() = Some(2);
        let mut op = harness(&sink);
        op.open().unwrap();
        for c in 1..=3u64 {
            op.process_batch(vec![c]).unwrap();
            op.snapshot(c).unwrap();
        }
        assert!(op.notify_checkpoint_complete(3).is_err());
        assert_eq!(sink.take(), vec![Call::Commit(vec![1], Some(1))]);
        op.notify_checkpoint_complete(3).unwrap();
        assert_eq!(sink.take(), vec![Call::Commit(vec![3], Some(3))]);
    }

    #[test]
    fn a_restore_recovers_the_pending_transactions_of_every_old_subtask_in_checkpoint_order() {
        let sink = Recording::default();
        let mut states = Vec::new();
        for subtask in 0..2u64 {
            let mut op = harness(&sink);
            op.open().unwrap();
            for c in 1..=2u64 {
                op.process_batch(vec![subtask * 10 + c]).unwrap();
                states.push(op.snapshot(c).unwrap());
            }
            op.process_batch(vec![subtask * 10 + 9]).unwrap();
        }
        // Restored from checkpoint 2 of both old subtasks (their last states).
        let restored = vec![states[1].clone(), states[3].clone()];
        let mut op = harness(&sink).restore(restored).unwrap();
        op.open().unwrap();
        assert_eq!(
            sink.take(),
            vec![
                Call::Commit(vec![1], Some(1)),
                Call::Commit(vec![11], Some(1)),
                Call::Commit(vec![2], Some(2)),
                Call::Commit(vec![12], Some(2)),
                Call::Abort(vec![]),
                Call::Abort(vec![]),
            ]
        );
    }

    #[test]
    fn without_checkpoints_the_end_of_input_commits_without_a_checkpoint() {
        let sink = Recording::default();
        let ctx = OperatorContext::for_test("sink", 0, 1);
        let mut op = OperatorTestHarness::with_context(TwoPhaseCommitOp::new(sink.clone()), ctx);
        op.open().unwrap();
        op.process_batch(vec![7]).unwrap();
        op.end_input().unwrap();
        assert_eq!(sink.take(), vec![Call::Commit(vec![7], None)]);
    }
}
