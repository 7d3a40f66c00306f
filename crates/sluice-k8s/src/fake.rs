//! An in-memory lease store for tests: one lease with optimistic versions, as the API server
//! keeps it, and per-client faults (unreachable, hanging, slow, answers lost after the write
//! was applied) switched while an election runs.
//!
//! ```
//! use sluice_cluster::lease::{LeaseConfig, Observation};
//! use sluice_k8s::LeaseApi;
//! use sluice_k8s::fake::{Fault, FakeLeaseStore};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! let store = FakeLeaseStore::default();
//! let client = store.client();
//! assert_eq!(client.get().await, Observation::Missing);
//! client.set_fault(Fault::Unreachable);
//! assert!(matches!(client.get().await, Observation::Failed(_)));
//! # });
//! ```

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use sluice_cluster::lease::{LeaseRecord, Observation, Versioned, WriteFailed};

use crate::api::LeaseApi;

/// What a [`FakeLeaseApi`] client suffers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fault {
    /// Reads and writes go through at once.
    #[default]
    None,
    /// Reads fail and writes fail without being applied (the API server cannot be reached).
    Unreachable,
    /// No call ever answers, and writes are not applied (a partition that swallows requests).
    Hang,
    /// Every request takes this long to reach the store, then is answered at once. A write
    /// is applied when it arrives even if its caller gave up waiting (a timeout), as an API
    /// server goes on with a request whose client left.
    Slow(Duration),
    /// Every request is carried out at once, and its answer takes this long: a read returns
    /// the lease as it was when the read was made.
    Late(Duration),
    /// Writes are applied but their answers are lost: the client is told they failed.
    LoseAnswers,
}

#[derive(Debug, Default)]
struct Stored {
    lease: Option<Versioned>,
    next_version: u64,
    writes: u64,
}

/// The store: one lease, shared by every [`client`](Self::client).
#[derive(Clone, Debug, Default)]
pub struct FakeLeaseStore {
    stored: Arc<Mutex<Stored>>,
}

impl FakeLeaseStore {
    /// A client of this store, with no fault.
    pub fn client(&self) -> FakeLeaseApi {
        FakeLeaseApi {
            store: self.clone(),
            fault: Arc::new(Mutex::new(Fault::None)),
        }
    }

    /// The lease as stored now.
    pub fn lease(&self) -> Option<Versioned> {
        self.with(|s| s.lease.clone())
    }

    /// How many writes were applied.
    pub fn writes(&self) -> u64 {
        self.with(|s| s.writes)
    }

    fn with<T>(&self, f: impl FnOnce(&mut Stored) -> T) -> T {
        // The lock is never held across an await, and no code under it panics.
        let mut stored = self.stored.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut stored)
    }

    fn write(
        &self,
        expected: Option<&str>,
        record: &LeaseRecord,
    ) -> Result<Versioned, WriteFailed> {
        self.with(|s| {
            let current = s.lease.as_ref().map(|(_, v)| v.as_str());
            if current != expected {
                return Err(WriteFailed(format!(
                    "conflict: the lease is at version {current:?}, the write expected {expected:?}"
                )));
            }
            s.next_version += 1;
            s.writes += 1;
            let written = (record.clone(), s.next_version.to_string());
            s.lease = Some(written.clone());
            Ok(written)
        })
    }
}

/// One candidate's connection to a [`FakeLeaseStore`]; clones share the fault switch.
#[derive(Clone, Debug)]
pub struct FakeLeaseApi {
    store: FakeLeaseStore,
    fault: Arc<Mutex<Fault>>,
}

impl FakeLeaseApi {
    /// Makes this client's later calls suffer `fault`.
    pub fn set_fault(&self, fault: Fault) {
        *self.fault.lock().unwrap_or_else(PoisonError::into_inner) = fault;
    }

    /// The fault in force.
    pub fn fault(&self) -> Fault {
        *self.fault.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn write(
        &self,
        expected: Option<&str>,
        record: &LeaseRecord,
    ) -> Result<Versioned, WriteFailed> {
        let fault = self.fault();
        let outcome = match fault {
            Fault::Unreachable => {
                return Err(WriteFailed("the fake API server is unreachable".into()));
            }
            Fault::Hang => std::future::pending().await,
            Fault::Slow(delay) => {
                // The request travels on its own: dropping this future does not stop it.
                let (store, expected, record) = (
                    self.store.clone(),
                    expected.map(str::to_string),
                    record.clone(),
                );
                let (answer, answered) = tokio::sync::oneshot::channel();
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    let _ = answer.send(store.write(expected.as_deref(), &record));
                });
                answered
                    .await
                    .unwrap_or_else(|_| Err(WriteFailed("the fake API server went away".into())))
            }
            Fault::None | Fault::LoseAnswers | Fault::Late(_) => self.store.write(expected, record),
        };
        match fault {
            Fault::LoseAnswers if outcome.is_ok() => {
                Err(WriteFailed("the answer to the write was lost".into()))
            }
            Fault::Late(delay) => {
                tokio::time::sleep(delay).await;
                outcome
            }
            _ => outcome,
        }
    }
}

impl LeaseApi for FakeLeaseApi {
    async fn get(&self) -> Observation {
        let fault = self.fault();
        match fault {
            Fault::Unreachable => {
                return Observation::Failed("the fake API server is unreachable".into());
            }
            Fault::Hang => std::future::pending().await,
            Fault::Slow(delay) => tokio::time::sleep(delay).await,
            Fault::None | Fault::LoseAnswers | Fault::Late(_) => {}
        }
        let observation = match self.store.lease() {
            None => Observation::Missing,
            Some(versioned) => Observation::Found(versioned),
        };
        if let Fault::Late(delay) = fault {
            tokio::time::sleep(delay).await;
        }
        observation
    }

    async fn create(&self, record: &LeaseRecord) -> Result<Versioned, WriteFailed> {
        self.write(None, record).await
    }

    async fn replace(&self, version: &str, record: &LeaseRecord) -> Result<Versioned, WriteFailed> {
        self.write(Some(version), record).await
    }
}
