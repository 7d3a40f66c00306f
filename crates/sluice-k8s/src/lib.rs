//! The Kubernetes edge of sluice's cluster mode (issue 15): a standby job master through
//! leader election over a `coordination.k8s.io/v1` Lease. The decisions are
//! [`sluice_cluster::lease::Elector`]'s (pure, property-tested there); this crate carries
//! them out against the API server with kube-rs, on tokio timers. It is the only crate that
//! depends on kube-rs and the Kubernetes API types, so a job in local mode never compiles
//! them.
//!
//! Where to find things:
//! - [`LeaseApi`] (`api.rs`): the seam (read the lease; create it; replace it at a version),
//!   and [`released`], the record a leader writes when it steps down;
//! - [`KubeLeaseApi`] (`kube_api.rs`): the Lease through kube-rs, and the pure mapping
//!   between a Lease's spec and the elector's record; a 409 Conflict is a lost race;
//! - [`fake`]: [`fake::FakeLeaseStore`], an in-memory lease with per-client faults, for tests;
//! - [`LeaderElection`] and [`Leadership`] (`election.rs`): the loop; `acquire().await`
//!   returns once this process leads, [`Leadership::lost`] resolves when it no longer does;
//! - [`HaSettings`] (`env.rs`): `SLUICE_HA`, `SLUICE_LEASE_NAME`, `POD_NAMESPACE`,
//!   `POD_NAME` per the cluster contract.
//!
//! A job master with a standby, as the manifests in `deploy/kubernetes/` run it:
//!
//! ```no_run
//! use sluice_k8s::LeaderElection;
//!
//! # async fn run_job() {}
//! # async fn main_() -> Result<(), sluice_k8s::SetupError> {
//! if let Some(election) = LeaderElection::from_env().await? {
//!     // Standby until the lease is ours, then run the job from its latest checkpoint.
//!     let leadership = election.acquire().await;
//!     tokio::select! {
//!         () = run_job() => leadership.release().await.unwrap_or(()),
//!         // Another job master may take over now: stop at once.
//!         () = leadership.lost() => std::process::exit(1),
//!     }
//! }
//! # Ok(())
//! # }
//! ```

mod api;
mod election;
mod env;
pub mod fake;
mod kube_api;

pub use api::{LeaseApi, released};
pub use election::{LeaderElection, Leadership};
pub use env::{DEFAULT_LEASE_NAME, HaSettings, SetupError};
pub use kube_api::{
    KubeLeaseApi, lease_from_record, record_from_spec, spec_from_record, versioned_from_lease,
};
