//! [`IcebergCommitterOp`], the single committer (parallelism 1): it gathers the writers'
//! [`WriteResult`]s between two barriers, keeps them per checkpoint in its checkpointed state,
//! and when a checkpoint completes commits the files of every pending checkpoint up to it, in
//! checkpoint order, each as one Iceberg snapshot (a fast append) whose summary records the
//! sink's job id and the checkpoint ([`decide`]'s keys). After a restore it reads the table's
//! snapshot history and skips the restored checkpoints the table already holds, so a failure
//! between a commit and the checkpoint's acknowledgement neither loses nor doubles a file.

pub mod decide;

use crate::catalog::retry::with_retries;
use crate::error::IcebergSinkError;
use crate::io;
use crate::sink::SinkConfig;
use crate::writer::{FileEntry, WriteResult};
use decide::{JOB_ID_KEY, MAX_COMMITTED_CHECKPOINT_KEY, max_committed_checkpoint, still_to_commit};
use iceberg::spec::{DataFile, TableMetadata, deserialize_data_file_from_json};
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use serde::{Deserialize, Serialize};
use sluice_core::{CheckpointId, UserError, codec};
use sluice_runtime::operator::{Collector, Operator, OperatorContext};
use sluice_runtime::state::OperatorState;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// What the committer stores at a checkpoint.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Stored {
    job_id: String,
    pending: Vec<(u64, Vec<FileEntry>)>,
}

/// The committer operator. Run it at parallelism 1.
pub struct IcebergCommitterOp {
    config: Arc<SinkConfig>,
    job_id: String,
    /// Files received since the last barrier.
    received: Vec<FileEntry>,
    /// Files per checkpoint, snapshotted and not yet committed.
    pending: BTreeMap<u64, Vec<FileEntry>>,
    restored: Vec<Vec<u8>>,
    checkpointing: bool,
}

impl Clone for IcebergCommitterOp {
    fn clone(&self) -> Self {
        IcebergCommitterOp::new(self.config.clone())
    }
}

impl IcebergCommitterOp {
    pub(crate) fn new(config: Arc<SinkConfig>) -> Self {
        IcebergCommitterOp {
            config,
            job_id: String::new(),
            received: Vec::new(),
            pending: BTreeMap::new(),
            restored: Vec::new(),
            checkpointing: false,
        }
    }

    /// The highest checkpoint of this job in the table.
    fn committed_checkpoint(&self) -> Result<Option<u64>, IcebergSinkError> {
        let table = self.config.load_table()?;
        Ok(max_committed_in(table.metadata(), &self.job_id))
    }

    /// Commits `files` as one snapshot for `checkpoint` (`None`: without checkpointing).
    fn commit(
        &self,
        checkpoint: Option<u64>,
        files: Vec<FileEntry>,
    ) -> Result<(), IcebergSinkError> {
        if files.is_empty() {
            return Ok(());
        }
        let cfg = self.config.clone();
        let job_id = self.job_id.clone();
        let action = match checkpoint {
            Some(c) => format!("commit checkpoint {c}"),
            None => "commit at end of input".to_string(),
        };
        let committed = io::run(async move {
            let catalog = cfg.catalog.catalog().clone();
            with_retries(&cfg.retry, || {
                let (catalog, files, job_id, ident) =
                    (catalog.clone(), &files, &job_id, &cfg.table);
                async move {
                    let table = catalog.load_table(ident).await.map_err(|e| e.to_string())?;
                    if let (Some(c), Some(m)) =
                        (checkpoint, max_committed_in(table.metadata(), job_id))
                        && c <= m
                    {
                        // An earlier try committed it and its answer was lost.
                        return Ok(());
                    }
                    let data_files = decode_files(table.metadata(), files)?;
                    let mut summary = HashMap::from([(JOB_ID_KEY.to_string(), job_id.clone())]);
                    if let Some(c) = checkpoint {
                        summary.insert(MAX_COMMITTED_CHECKPOINT_KEY.to_string(), c.to_string());
                    }
                    let tx = Transaction::new(&table);
                    let tx = tx
                        .fast_append()
                        .add_data_files(data_files)
                        .set_snapshot_properties(summary)
                        .apply(tx)
                        .map_err(|e| e.to_string())?;
                    tx.commit(catalog.as_ref())
                        .await
                        .map_err(|e| e.to_string())?;
                    Ok::<(), String>(())
                }
            })
            .await
        })
        .map_err(IcebergSinkError::Io)?;
        committed.map_err(|message| IcebergSinkError::Catalog {
            catalog: self.config.catalog.name().to_string(),
            table: self.config.table_name(),
            action,
            message,
        })?;
        if let (Some(c), Some(hook)) = (checkpoint, &self.config.after_commit) {
            hook(c).map_err(|e| {
                IcebergSinkError::Io(format!("after committing checkpoint {c}: {e}"))
            })?;
        }
        Ok(())
    }

    /// Commits every pending checkpoint up to `upto`, in order, dropping each once committed.
    fn commit_upto(&mut self, upto: u64) -> Result<(), IcebergSinkError> {
        while let Some(entry) = self.pending.first_entry() {
            if *entry.key() > upto {
                break;
            }
            let (checkpoint, files) = entry.remove_entry();
            if let Err(e) = self.commit(Some(checkpoint), files.clone()) {
                self.pending.insert(checkpoint, files);
                return Err(e);
            }
        }
        Ok(())
    }
}

/// The highest checkpoint of `job_id` along the current snapshot's ancestry.
fn max_committed_in(metadata: &TableMetadata, job_id: &str) -> Option<u64> {
    let mut summaries = Vec::new();
    let mut next = metadata.current_snapshot();
    while let Some(snapshot) = next {
        summaries.push(&snapshot.summary().additional_properties);
        next = snapshot
            .parent_snapshot_id()
            .and_then(|id| metadata.snapshot_by_id(id));
    }
    max_committed_checkpoint(summaries, job_id)
}

fn decode_files(metadata: &TableMetadata, files: &[FileEntry]) -> Result<Vec<DataFile>, String> {
    let schema = metadata.current_schema();
    files
        .iter()
        .map(|f| {
            let spec = metadata
                .partition_spec_by_id(f.spec_id)
                .ok_or_else(|| format!("partition spec {} is not in the table", f.spec_id))?;
            let partition_type = spec.partition_type(schema).map_err(|e| e.to_string())?;
            deserialize_data_file_from_json(&f.json, f.spec_id, &partition_type, schema)
                .map_err(|e| format!("decoding a data file from a writer: {e}"))
        })
        .collect()
}

impl Operator<WriteResult> for IcebergCommitterOp {
    type Out = ();

    fn initialize_state(&mut self, state: OperatorState) -> Result<(), UserError> {
        self.restored = state.into_entries();
        Ok(())
    }

    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.checkpointing = ctx.checkpointing_enabled();
        let mut pending = BTreeMap::new();
        let mut job_id = None;
        for entry in std::mem::take(&mut self.restored) {
            let stored: Stored = codec::decode(&entry)?;
            job_id.get_or_insert(stored.job_id);
            pending.extend(stored.pending);
        }
        self.job_id = match job_id {
            Some(id) => id,
            None => self
                .config
                .job_id
                .clone()
                .unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
        };
        if !pending.is_empty() {
            // Restoring means the restored checkpoint completed: commit what the table lacks.
            let committed = self.committed_checkpoint()?;
            let last = pending.keys().next_back().copied().unwrap_or(0);
            self.pending = still_to_commit(pending, committed).into_iter().collect();
            self.commit_upto(last)?;
        }
        Ok(())
    }

    fn process_batch(
        &mut self,
        batch: Vec<WriteResult>,
        _out: &mut Collector<()>,
    ) -> Result<(), UserError> {
        for result in batch {
            self.received.extend(result.files);
        }
        Ok(())
    }

    fn snapshot_state(
        &mut self,
        checkpoint: CheckpointId,
        _out: &mut Collector<()>,
    ) -> Result<OperatorState, UserError> {
        if !self.received.is_empty() {
            self.pending
                .entry(checkpoint.0)
                .or_default()
                .append(&mut self.received);
        }
        let stored = Stored {
            job_id: self.job_id.clone(),
            pending: self.pending.iter().map(|(c, f)| (*c, f.clone())).collect(),
        };
        Ok(OperatorState::from_entries(vec![codec::encode(&stored)?]))
    }

    fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> Result<(), UserError> {
        Ok(self.commit_upto(checkpoint.0)?)
    }

    fn end_input(&mut self, _out: &mut Collector<()>) -> Result<(), UserError> {
        if !self.checkpointing {
            // Without checkpoints nothing else will commit: do it now (no exactly-once then).
            let files = std::mem::take(&mut self.received);
            self.commit(None, files)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
