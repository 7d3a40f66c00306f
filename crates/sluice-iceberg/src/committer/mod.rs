//! [`IcebergCommitter`], the single committer (parallelism 1): a [`TwoPhaseCommitSink`] of the
//! writers' [`WriteResult`]s, driven by the runtime's [`TwoPhaseCommitOp`] like any exactly-once
//! sink. A transaction is what one checkpoint hands it: the files received between two barriers
//! ([`CheckpointFiles`]), kept pending per checkpoint in the operator's checkpointed state. When a
//! checkpoint completes, the operator commits every pending checkpoint up to it, oldest first,
//! each as one Iceberg snapshot (a fast append) whose summary records the sink's job id and the
//! checkpoint ([`decide`]'s keys). A checkpoint without files is committed (as an empty snapshot)
//! only when it ends a run of [`EmptyCommits`]' length, Iceberg's
//! `flink.max-continuous-empty-commits`, so the table's max committed checkpoint moves on. After a
//! restore it reads the table's snapshot history and skips the restored checkpoints the table
//! already holds, so a failure between a commit and the checkpoint's acknowledgement neither
//! loses nor doubles a file.

pub mod decide;

use crate::catalog::retry::with_retries;
use crate::error::IcebergSinkError;
use crate::io;
use crate::sink::SinkConfig;
use crate::writer::{FileEntry, WriteResult};
use decide::{
    EmptyCommits, JOB_ID_KEY, MAX_COMMITTED_CHECKPOINT_KEY, max_committed_checkpoint,
    still_to_commit,
};
use iceberg::spec::{DataFile, TableMetadata, deserialize_data_file_from_json};
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use serde::{Deserialize, Serialize};
use sluice_core::{CheckpointId, UserError};
use sluice_runtime::OperatorContext;
#[cfg(doc)]
use sluice_runtime::api::TwoPhaseCommitOp;
use sluice_runtime::api::{Restored, TwoPhaseCommitSink};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// The committer's transaction: the data files the writers handed on for one checkpoint, with
/// the job id they are committed under (Iceberg's `IcebergCommittable`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointFiles {
    /// The sink's job id (`sluice.job-id` in the snapshot summary).
    pub job_id: String,
    /// The files, in the order they arrived.
    pub files: Vec<FileEntry>,
}

/// The committer. Run it at parallelism 1, in a [`TwoPhaseCommitOp`].
pub struct IcebergCommitter {
    config: Arc<SinkConfig>,
    job_id: String,
    empty: EmptyCommits,
}

impl Clone for IcebergCommitter {
    fn clone(&self) -> Self {
        IcebergCommitter::new(self.config.clone())
    }
}

impl IcebergCommitter {
    pub(crate) fn new(config: Arc<SinkConfig>) -> Self {
        let empty = EmptyCommits::new(config.max_continuous_empty_commits);
        IcebergCommitter {
            config,
            job_id: String::new(),
            empty,
        }
    }

    /// The highest checkpoint of `job_id` in the table.
    fn committed_checkpoint(&self, job_id: &str) -> Result<Option<u64>, IcebergSinkError> {
        let table = self.config.load_table()?;
        Ok(max_committed_in(table.metadata(), job_id))
    }

    /// Commits `files` as one snapshot for `checkpoint` (`None`: without checkpointing), under
    /// `job_id`; with no files, a snapshot that only records the checkpoint.
    fn commit_files(
        &self,
        checkpoint: Option<u64>,
        job_id: &str,
        files: Vec<FileEntry>,
    ) -> Result<(), IcebergSinkError> {
        let cfg = self.config.clone();
        let job_id = job_id.to_string();
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

impl TwoPhaseCommitSink<WriteResult> for IcebergCommitter {
    type Transaction = CheckpointFiles;

    fn open(&mut self, _ctx: &OperatorContext) -> Result<(), UserError> {
        // A restore replaces it with the restored job id (`recover`).
        self.job_id = self
            .config
            .job_id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        Ok(())
    }

    fn begin_transaction(&mut self) -> Result<CheckpointFiles, UserError> {
        Ok(CheckpointFiles {
            job_id: self.job_id.clone(),
            files: Vec::new(),
        })
    }

    fn write(
        &mut self,
        txn: &mut CheckpointFiles,
        batch: Vec<WriteResult>,
    ) -> Result<(), UserError> {
        for result in batch {
            txn.files.extend(result.files);
        }
        Ok(())
    }

    fn pre_commit(&mut self, _txn: &mut CheckpointFiles) -> Result<(), UserError> {
        // The writers closed the files before they handed them on: they are durable already.
        Ok(())
    }

    fn commit(
        &mut self,
        txn: CheckpointFiles,
        checkpoint: Option<CheckpointId>,
    ) -> Result<(), UserError> {
        match checkpoint {
            // Without checkpointing nothing else will commit (no exactly-once then).
            None if txn.files.is_empty() => Ok(()),
            None => Ok(self.commit_files(None, &txn.job_id, txn.files)?),
            Some(c) if self.empty.commit(!txn.files.is_empty()) => {
                Ok(self.commit_files(Some(c.0), &txn.job_id, txn.files)?)
            }
            Some(c) => {
                let table = self.config.table_name();
                tracing::debug!(%table, checkpoint = c.0, "no data files: commit skipped");
                Ok(())
            }
        }
    }

    fn abort(&mut self, _txn: CheckpointFiles) -> Result<(), UserError> {
        // Files of a checkpoint that never completes stay unreferenced (see the crate's docs).
        Ok(())
    }

    fn recover(&mut self, restored: Restored<CheckpointFiles>) -> Result<(), UserError> {
        let restored_job = restored
            .pending
            .first()
            .map(|(_, t)| &t.job_id)
            .or(restored.open.first().map(|t| &t.job_id));
        if let Some(job_id) = restored_job {
            // A restored job keeps its id.
            self.job_id = job_id.clone();
        }
        if restored.pending.is_empty() {
            return Ok(());
        }
        // Restoring means the restored checkpoint completed: commit what the table lacks.
        let mut pending: BTreeMap<u64, CheckpointFiles> = BTreeMap::new();
        for (c, txn) in restored.pending {
            let entry = pending.entry(c.0).or_insert_with(|| CheckpointFiles {
                job_id: txn.job_id,
                files: Vec::new(),
            });
            entry.files.extend(txn.files);
        }
        let committed = self.committed_checkpoint(&self.job_id)?;
        for (c, txn) in still_to_commit(pending, committed) {
            self.commit(txn, Some(CheckpointId(c)))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
