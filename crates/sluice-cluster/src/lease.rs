//! Leader election over a lease, as Kubernetes' `coordination.k8s.io/v1` Lease is used by
//! client-go's leader election: one record names the holder and when it last renewed; the
//! holder renews it every retry period; a candidate takes it over once it has seen the record
//! unchanged for the lease duration. Writes are optimistic (they name the version they
//! replace), so of two candidates racing for an expired lease one wins.
//!
//! This module is the pure part: an [`Elector`] is told what the API returned and decides
//! what to write; the caller does the I/O (kube-rs against the API server, or a fake in
//! tests) and reports the outcome. Expiry is judged by the candidate's own clock from when it
//! *observed* the record change, never by comparing clocks across machines.
//!
//! Safety: a leader counts itself leader only while its last successful renewal is younger
//! than `renew_deadline`; others take over only after watching the record unchanged for
//! `lease_duration`, which is longer. So two electors never both count themselves leader
//! (with clocks that run at the same rate), which the property test checks against a fake
//! API under random schedules, stalls and failures.
//!
//! ```
//! use sluice_cluster::lease::{Action, Elector, LeaseConfig, Observation};
//! use std::time::{Duration, Instant};
//!
//! let config = LeaseConfig::new("jm-a").unwrap();
//! let mut a = Elector::new(config);
//! let t0 = Instant::now();
//! // No lease yet: create it, naming ourselves.
//! let Action::Create(record) = a.decide(t0, 0, Observation::Missing) else { panic!() };
//! assert_eq!(record.holder.as_deref(), Some("jm-a"));
//! // The API accepted it at version "1": we lead.
//! a.written(t0, Ok((record, "1".to_string())));
//! assert!(a.is_leader(t0));
//! ```

use std::time::{Duration, Instant};

/// How an elector runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    /// This candidate's name in the lease (for example the pod's name).
    pub identity: String,
    /// How long others wait, after seeing the lease last change, before taking it over.
    pub lease_duration: Duration,
    /// How long a leader keeps leading without a successful renewal.
    pub renew_deadline: Duration,
    /// How often every candidate reads the lease (and the leader renews it).
    pub retry_period: Duration,
}

/// A configuration that could let two leaders overlap, or name no one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LeaseConfigError {
    /// The identity is empty.
    #[error("the lease identity is empty")]
    NoIdentity,
    /// The durations are not ordered `lease_duration > renew_deadline > retry_period > 0`.
    #[error(
        "lease durations must satisfy lease_duration ({lease:?}) > renew_deadline ({renew:?}) > retry_period ({retry:?}) > 0"
    )]
    Order {
        /// `lease_duration`.
        lease: Duration,
        /// `renew_deadline`.
        renew: Duration,
        /// `retry_period`.
        retry: Duration,
    },
}

impl LeaseConfig {
    /// client-go's defaults: a lease of 15 s, renewals within 10 s, a read every 2 s.
    pub fn new(identity: impl Into<String>) -> Result<Self, LeaseConfigError> {
        LeaseConfig {
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
        .validated()
    }

    /// The configuration if its values are coherent.
    pub fn validated(self) -> Result<Self, LeaseConfigError> {
        if self.identity.is_empty() {
            return Err(LeaseConfigError::NoIdentity);
        }
        if !(self.lease_duration > self.renew_deadline
            && self.renew_deadline > self.retry_period
            && !self.retry_period.is_zero())
        {
            return Err(LeaseConfigError::Order {
                lease: self.lease_duration,
                renew: self.renew_deadline,
                retry: self.retry_period,
            });
        }
        Ok(self)
    }
}

/// The lease's content (the spec of a Kubernetes Lease).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseRecord {
    /// Who holds it.
    pub holder: Option<String>,
    /// The holder's lease duration.
    pub lease_duration: Duration,
    /// When the holder took it, in milliseconds since the epoch (the holder's wall clock; for
    /// people).
    pub acquire_time_ms: i64,
    /// When the holder last renewed it (likewise).
    pub renew_time_ms: i64,
    /// How many times it changed hands.
    pub transitions: u32,
}

/// A lease and the API's version of it (Kubernetes' `resourceVersion`).
pub type Versioned = (LeaseRecord, String);

/// What reading the lease returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observation {
    /// There is no lease.
    Missing,
    /// The lease at a version.
    Found(Versioned),
    /// The API could not be reached, or answered with an error.
    Failed(String),
}

/// What to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Create the lease (fails if someone created it first).
    Create(LeaseRecord),
    /// Replace the lease at `version` (fails if it changed since).
    Replace {
        /// The version read.
        version: String,
        /// The new content.
        record: LeaseRecord,
    },
    /// Nothing this round.
    Wait,
}

/// A write lost a race, or failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("lease write failed: {0}")]
pub struct WriteFailed(pub String);

/// One candidate's view and decisions.
#[derive(Clone, Debug)]
pub struct Elector {
    config: LeaseConfig,
    /// The last record seen, its version and when it was seen to change.
    observed: Option<(Versioned, Instant)>,
    /// When our last successful write naming us was *issued*, while we hold the lease: a
    /// slow answer must not stretch our term beyond what others measure from seeing it.
    renewed: Option<Instant>,
    /// When the write in flight was issued.
    issued: Option<Instant>,
}

impl Elector {
    /// A candidate with `config`.
    pub fn new(config: LeaseConfig) -> Self {
        Elector {
            config,
            observed: None,
            renewed: None,
            issued: None,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }

    fn mine(&self, wall_ms: i64, acquire_ms: i64, transitions: u32) -> LeaseRecord {
        LeaseRecord {
            holder: Some(self.config.identity.clone()),
            lease_duration: self.config.lease_duration,
            acquire_time_ms: acquire_ms,
            renew_time_ms: wall_ms,
            transitions,
        }
    }

    fn observe(&mut self, now: Instant, seen: Versioned) {
        let changed = self.observed.as_ref().is_none_or(|(old, _)| *old != seen);
        if changed {
            self.observed = Some((seen, now));
        }
    }

    /// One round at `now` (every retry period), `wall_ms` being the wall clock for the record:
    /// what to write, given what reading the lease returned.
    pub fn decide(&mut self, now: Instant, wall_ms: i64, observation: Observation) -> Action {
        let action = self.choose(now, wall_ms, observation);
        self.issued = (action != Action::Wait).then_some(now);
        action
    }

    fn choose(&mut self, now: Instant, wall_ms: i64, observation: Observation) -> Action {
        match observation {
            Observation::Failed(_) => Action::Wait,
            Observation::Missing => {
                self.observed = None;
                Action::Create(self.mine(wall_ms, wall_ms, 0))
            }
            Observation::Found(seen) => {
                self.observe(now, seen.clone());
                let (record, version) = seen;
                let ours = record.holder.as_deref() == Some(self.config.identity.as_str());
                if ours {
                    let renewed = self.mine(wall_ms, record.acquire_time_ms, record.transitions);
                    return Action::Replace {
                        version,
                        record: renewed,
                    };
                }
                // Someone else's, or nobody's: ours only once it looks abandoned.
                self.renewed = None;
                let since = self.observed.as_ref().map(|(_, at)| *at).unwrap_or(now);
                let expired = record.holder.is_none()
                    || now.saturating_duration_since(since) >= record.lease_duration;
                if expired {
                    let taken = self.mine(wall_ms, wall_ms, record.transitions + 1);
                    Action::Replace {
                        version,
                        record: taken,
                    }
                } else {
                    Action::Wait
                }
            }
        }
    }

    /// The outcome of the write [`decide`](Self::decide) asked for, `now` being when it
    /// returned: the lease and version written, or why it failed.
    pub fn written(&mut self, now: Instant, outcome: Result<Versioned, WriteFailed>) {
        let issued = self.issued.take().unwrap_or(now);
        // Lost a race or the API failed: the next read tells what happened, and a leader keeps
        // leading until its renew deadline passes.
        if let Ok(written) = outcome {
            let ours = written.0.holder.as_deref() == Some(self.config.identity.as_str());
            self.observed = Some((written, now));
            self.renewed = ours.then_some(issued);
        }
    }

    /// Whether this candidate leads at `now`: it holds the lease and renewed it within the
    /// renew deadline. A leader that cannot renew stops leading before anyone else may take
    /// over.
    pub fn is_leader(&self, now: Instant) -> bool {
        self.renewed
            .is_some_and(|at| now.saturating_duration_since(at) < self.config.renew_deadline)
    }

    /// The holder named by the last lease seen.
    pub fn leader(&self) -> Option<&str> {
        self.observed
            .as_ref()
            .and_then(|((record, _), _)| record.holder.as_deref())
    }
}

#[cfg(test)]
mod tests;
