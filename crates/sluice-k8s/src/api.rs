//! The seam between the election loop and a lease store: [`LeaseApi`] reads the lease and
//! writes it optimistically (create if absent, replace at a version).
//! [`KubeLeaseApi`](crate::KubeLeaseApi) is the Kubernetes implementation,
//! [`FakeLeaseApi`](crate::fake::FakeLeaseApi) the in-memory one the tests use.

use std::future::Future;

use sluice_cluster::lease::{LeaseRecord, Observation, Versioned, WriteFailed};

/// One lease in a store with optimistic concurrency, as the Kubernetes API server keeps a
/// `coordination.k8s.io/v1` Lease.
///
/// Every method answers; none panics. A failure to reach the store is an
/// [`Observation::Failed`] or a [`WriteFailed`], and so is a lost race: the election reads
/// the lease again next round to learn what happened.
pub trait LeaseApi: Send + Sync {
    /// Reads the lease: missing, found at a version, or why it could not be read.
    fn get(&self) -> impl Future<Output = Observation> + Send;

    /// Creates the lease with `record`; fails if it exists.
    fn create(
        &self,
        record: &LeaseRecord,
    ) -> impl Future<Output = Result<Versioned, WriteFailed>> + Send;

    /// Replaces the lease at `version` with `record`; fails if the lease changed since.
    fn replace(
        &self,
        version: &str,
        record: &LeaseRecord,
    ) -> impl Future<Output = Result<Versioned, WriteFailed>> + Send;
}

/// The record a leader writes when it steps down: nobody holds it, so the next candidate
/// to read it takes it at once instead of waiting out the lease duration.
pub fn released(record: &LeaseRecord, wall_ms: i64) -> LeaseRecord {
    LeaseRecord {
        holder: None,
        renew_time_ms: wall_ms,
        ..record.clone()
    }
}
