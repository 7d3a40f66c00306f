//! The pure decisions of sluice's cluster mode (issue 15), kept apart from the I/O that will
//! carry them (gRPC between the job master and the task managers, the Kubernetes API for the
//! lease), so each is tested alone on a simulated clock.
//!
//! Where to find things:
//! - [`fencing`]: [`fencing::Fence`] (job-master epoch, attempt) on every control message,
//!   and [`fencing::FenceKeeper`], which drops what a deposed job master or a failed attempt
//!   sends;
//! - [`heartbeat`]: [`heartbeat::HeartbeatMonitor`], which peers have been silent too long;
//! - [`lease`]: [`lease::Elector`], leader election for a standby job master over a
//!   Kubernetes-style lease, with a fake lease API in its tests;
//! - [`placement`]: [`placement::slot_owners`], which task manager owns each slot a job needs.
//!
//! ```
//! use sluice_cluster::fencing::{Fence, FenceKeeper, Verdict};
//!
//! // A task manager hears from the job master of epoch 3, then from a deposed one of epoch 2.
//! let mut keeper = FenceKeeper::default();
//! assert_eq!(keeper.check(Fence::new(3, 0)), Verdict::Adopt);
//! assert!(matches!(keeper.check(Fence::new(2, 5)), Verdict::Stale { .. }));
//! ```

pub mod fencing;
pub mod heartbeat;
pub mod lease;
pub mod placement;
