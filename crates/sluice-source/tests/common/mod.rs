//! Helpers shared by the end-to-end suites: JSON-lines input files, and a record log that tests
//! wait on instead of sleeping.

#![allow(dead_code)]

use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

/// One input record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rec {
    pub id: u64,
}

/// Writes `files` files of `lines` records each into `dir` (ids `offset..`), named so that they
/// sort in id order, and returns the number of records.
pub fn write_files(dir: &Path, files: u64, lines: u64, offset: u64) -> u64 {
    for f in 0..files {
        let mut text = String::new();
        for l in 0..lines {
            let id = offset + f * lines + l;
            text.push_str(&serde_json::to_string(&Rec { id }).unwrap());
            text.push('\n');
        }
        let name = format!("part-{:06}.json", offset + f * lines);
        // Written under a hidden name and renamed into place, as a producer should.
        let tmp = dir.join(format!(".{name}"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(tmp, dir.join(name)).unwrap();
    }
    files * lines
}

/// The ids a job saw, and a way to wait until it saw enough.
#[derive(Clone, Default)]
pub struct Seen {
    ids: Arc<Mutex<Vec<u64>>>,
    changed: Arc<Notify>,
}

impl Seen {
    pub fn push(&self, id: u64) {
        self.ids.lock().unwrap().push(id);
        self.changed.notify_waiters();
    }

    pub fn ids(&self) -> Vec<u64> {
        self.ids.lock().unwrap().clone()
    }

    /// Waits until at least `n` ids were seen.
    pub async fn wait_for(&self, n: usize) {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.ids.lock().unwrap().len() >= n {
                return;
            }
            notified.await;
        }
    }
}
