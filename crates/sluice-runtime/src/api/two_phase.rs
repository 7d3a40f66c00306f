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
///     fn commit(&mut self, txn: Vec<u64>) -> Result<(), UserError> {
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

    /// Called once before anything else (and before recovering restored transactions).
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
    fn commit(&mut self, txn: Self::Transaction) -> Result<(), UserError>;
    /// Discards `txn`. Idempotent.
    fn abort(&mut self, txn: Self::Transaction) -> Result<(), UserError>;
    /// Commits a pre-committed transaction found in a restored checkpoint.
    fn recover_and_commit(&mut self, txn: Self::Transaction) -> Result<(), UserError> {
        self.commit(txn)
    }
    /// Aborts a transaction that was open when the restored checkpoint was taken.
    fn recover_and_abort(&mut self, txn: Self::Transaction) -> Result<(), UserError> {
        self.abort(txn)
    }
    /// Releases resources.
    fn close(&mut self) -> Result<(), UserError> {
        Ok(())
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

/// Drives a [`TwoPhaseCommitSink`] from the operator lifecycle.
pub(crate) struct TwoPhaseCommitOp<T, S: TwoPhaseCommitSink<T>> {
    sink: S,
    current: Option<S::Transaction>,
    pending: BTreeMap<u64, S::Transaction>,
    restored: Vec<Vec<u8>>,
    checkpointing: bool,
    _t: PhantomData<fn(T)>,
}

impl<T, S: TwoPhaseCommitSink<T> + Clone> Clone for TwoPhaseCommitOp<T, S> {
    fn clone(&self) -> Self {
        TwoPhaseCommitOp {
            sink: self.sink.clone(),
            current: None,
            pending: BTreeMap::new(),
            restored: Vec::new(),
            checkpointing: false,
            _t: PhantomData,
        }
    }
}

impl<T, S: TwoPhaseCommitSink<T>> TwoPhaseCommitOp<T, S> {
    pub(crate) fn new(sink: S) -> Self {
        TwoPhaseCommitOp {
            sink,
            current: None,
            pending: BTreeMap::new(),
            restored: Vec::new(),
            checkpointing: false,
            _t: PhantomData,
        }
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

    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.checkpointing = ctx.checkpointing_enabled();
        self.sink.open(ctx)?;
        for entry in std::mem::take(&mut self.restored) {
            let stored: Stored<S::Transaction> = codec::decode(&entry)?;
            for (_, txn) in stored.pending {
                self.sink.recover_and_commit(txn)?;
            }
            if let Some(txn) = stored.current {
                self.sink.recover_and_abort(txn)?;
            }
        }
        Ok(())
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
            self.sink.commit(txn)?;
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
        let later = self.pending.split_off(&(checkpoint.0 + 1));
        let done = std::mem::replace(&mut self.pending, later);
        for (_, txn) in done {
            self.sink.commit(txn)?;
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
