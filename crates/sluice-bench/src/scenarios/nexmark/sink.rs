//! [`RowFiles`]: the sluice side's result sink, the counterpart of `NexmarkFlink.java`'s
//! `RowFileSink`: each subtask writes its rows to `<dir>/part-<subtask>`, one JSON array per
//! line (a tuple serializes as one), and counts them.

use serde::Serialize;
use sluice::prelude::*;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Writes rows as JSON-array lines, one file per subtask.
pub struct RowFiles<T> {
    dir: PathBuf,
    rows: Arc<AtomicU64>,
    writer: Option<BufWriter<File>>,
    written: u64,
    _t: PhantomData<fn(T)>,
}

impl<T> RowFiles<T> {
    /// A sink writing into `dir` (which must exist), adding its row count to `rows`.
    pub fn new(dir: impl Into<PathBuf>, rows: Arc<AtomicU64>) -> Self {
        RowFiles {
            dir: dir.into(),
            rows,
            writer: None,
            written: 0,
            _t: PhantomData,
        }
    }
}

impl<T> Clone for RowFiles<T> {
    fn clone(&self) -> Self {
        RowFiles::new(self.dir.clone(), self.rows.clone())
    }
}

impl<T: Serialize + Send + 'static> Sink<T> for RowFiles<T> {
    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        let path = self.dir.join(format!("part-{}", ctx.subtask_index()));
        let file = File::create(&path).map_err(|e| format!("creating {}: {e}", path.display()))?;
        self.writer = Some(BufWriter::with_capacity(1 << 20, file));
        Ok(())
    }

    fn write_batch(&mut self, batch: Vec<T>) -> Result<(), UserError> {
        let w = self.writer.as_mut().ok_or("the row sink was not opened")?;
        self.written += batch.len() as u64;
        for row in batch {
            serde_json::to_writer(&mut *w, &row)?;
            w.write_all(b"\n")?;
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), UserError> {
        if let Some(w) = self.writer.as_mut() {
            w.flush()?;
        }
        self.rows.fetch_add(self.written, Ordering::Relaxed);
        self.written = 0;
        Ok(())
    }
}
