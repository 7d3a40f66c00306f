//! The election loop on tokio: [`LeaderElection::acquire`] runs rounds of the pure
//! [`Elector`] every retry period (read the lease, decide, write, report) until this
//! candidate leads, then hands back a [`Leadership`] while a spawned task keeps renewing.
//! [`Leadership::lost`] resolves at the renew deadline of the last renewal that succeeded,
//! by a timer of its own, so a renewal stuck in a slow API call cannot stretch the term.
//!
//! Every API call is bounded by a timeout (the retry period unless set otherwise), every
//! wait is a tokio timer, and the only channels are a `watch` of the term and a oneshot for
//! [`Leadership::release`]. A term, once lost, stays lost: to lead again, call
//! [`acquire`](LeaderElection::acquire) again, which starts from a fresh view of the lease.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sluice_cluster::lease::{Action, Elector, LeaseConfig, Observation, Versioned, WriteFailed};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, Interval, MissedTickBehavior, sleep_until, timeout};

use crate::api::{LeaseApi, released};
use crate::env::{HaSettings, SetupError};
use crate::kube_api::KubeLeaseApi;

/// Leader election for one candidate over one lease.
///
/// ```
/// use sluice_cluster::lease::LeaseConfig;
/// use sluice_k8s::LeaderElection;
/// use sluice_k8s::fake::FakeLeaseStore;
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap().block_on(async {
/// let store = FakeLeaseStore::default();
/// let election = LeaderElection::new(store.client(), LeaseConfig::new("jm-a").unwrap());
/// let leadership = election.acquire().await;
/// assert!(leadership.is_leading());
/// // Run the job until it ends or leadership is lost, whichever comes first.
/// tokio::select! {
///     _ = leadership.lost() => unreachable!("nobody else competes"),
///     _ = tokio::time::sleep(std::time::Duration::from_secs(60)) => {}
/// }
/// leadership.release().await.unwrap();
/// assert_eq!(store.lease().unwrap().0.holder, None);
/// # });
/// ```
#[derive(Debug)]
pub struct LeaderElection<A> {
    api: Arc<A>,
    config: LeaseConfig,
    call_timeout: Duration,
}

impl<A: LeaseApi + 'static> LeaderElection<A> {
    /// A candidate named by `config.identity`, competing through `api`. Each API call may
    /// take up to the retry period.
    pub fn new(api: A, config: LeaseConfig) -> Self {
        let call_timeout = config.retry_period;
        LeaderElection {
            api: Arc::new(api),
            config,
            call_timeout,
        }
    }

    /// Bounds each API call by `call_timeout` instead of the retry period. Keep two calls
    /// well inside the renew deadline, or a slow API server costs the leadership.
    pub fn with_call_timeout(mut self, call_timeout: Duration) -> Self {
        self.call_timeout = call_timeout;
        self
    }

    /// The lease configuration (identity and timing).
    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }

    /// The lease API.
    pub fn api(&self) -> &A {
        &self.api
    }

    /// Waits until this candidate leads, then keeps renewing in a spawned task for as long
    /// as the returned [`Leadership`] lives. Failures of the API are logged and retried every
    /// retry period; this never gives up. Cancelling it (dropping the future) leaves nothing
    /// running.
    pub async fn acquire(&self) -> Leadership {
        let mut candidate = Candidate {
            api: Arc::clone(&self.api),
            elector: Elector::new(self.config.clone()),
            call_timeout: self.call_timeout,
            until: None,
            transitions: 0,
        };
        let mut ticker = tokio::time::interval(self.config.retry_period);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let until = loop {
            ticker.tick().await;
            if let Some(until) = candidate.round().await {
                break until;
            }
        };
        tracing::info!(identity = %self.config.identity, "acquired the lease: leading");
        let (term_tx, term_rx) = watch::channel(Term::Leading(until));
        let (release_tx, release_rx) = oneshot::channel();
        let transitions = candidate.transitions;
        let renewer = tokio::spawn(renew(candidate, ticker, until, term_tx, release_rx));
        Leadership {
            identity: self.config.identity.clone(),
            transitions,
            term: term_rx,
            release: Some(release_tx),
            renewer,
        }
    }
}

impl LeaderElection<KubeLeaseApi> {
    /// The election `settings` describe, over the Kubernetes Lease they name, with a client
    /// configured from the pod's service account (or a local kubeconfig).
    pub async fn from_settings(settings: HaSettings) -> Result<Self, SetupError> {
        let api = KubeLeaseApi::connect(settings.namespace.as_deref(), settings.lease_name).await?;
        Ok(LeaderElection::new(api, settings.lease))
    }

    /// The election the environment asks for (`SLUICE_HA=kubernetes`, `SLUICE_LEASE_NAME`,
    /// `POD_NAMESPACE`, `POD_NAME`; see [`HaSettings::from_lookup`]), or `None` when
    /// `SLUICE_HA` is not set.
    pub async fn from_env() -> Result<Option<Self>, SetupError> {
        match HaSettings::from_env()? {
            None => Ok(None),
            Some(settings) => Ok(Some(Self::from_settings(settings).await?)),
        }
    }
}

/// A term of leadership: the deadline of the last renewal, or over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Term {
    Leading(Instant),
    Lost,
}

/// Answers a release with the outcome of its write.
type ReleaseReply = oneshot::Sender<Result<(), WriteFailed>>;

/// This process leads, for as long as [`lost`](Self::lost) has not resolved. Dropping it
/// stops renewing (others take over once the lease duration has passed);
/// [`release`](Self::release) hands the lease over at once.
#[derive(Debug)]
pub struct Leadership {
    identity: String,
    transitions: u32,
    term: watch::Receiver<Term>,
    release: Option<oneshot::Sender<ReleaseReply>>,
    renewer: JoinHandle<()>,
}

impl Leadership {
    /// This candidate's identity in the lease.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The Lease's `leaseTransitions` when this process took it: one more at every change of
    /// holder, so a later leader's is larger (as long as nobody deletes the Lease). A job
    /// master may build its fencing epoch on it.
    pub fn transitions(&self) -> u32 {
        self.transitions
    }

    /// Whether this process still leads now.
    pub fn is_leading(&self) -> bool {
        match *self.term.borrow() {
            Term::Leading(until) => Instant::now() < until,
            Term::Lost => false,
        }
    }

    /// Resolves when leadership is lost: the renew deadline of the last successful renewal
    /// passed, or the lease was seen held by someone else. Resolves at once if it already
    /// was. The job master stops its job when this resolves.
    pub async fn lost(&self) {
        let mut term = self.term.clone();
        loop {
            let current = *term.borrow_and_update();
            let Term::Leading(until) = current else {
                return;
            };
            tokio::select! {
                () = sleep_until(until) => return,
                changed = term.changed() => {
                    if changed.is_err() {
                        // The renewer ended without a word: nothing renews any more.
                        return;
                    }
                }
            }
        }
    }

    /// Stops renewing and, if the lease still names this candidate, writes it as held by
    /// nobody, so a standby takes over at its next read instead of after the lease
    /// duration. A failed write is returned; the lease then expires as if dropped.
    pub async fn release(mut self) -> Result<(), WriteFailed> {
        let Some(release) = self.release.take() else {
            return Ok(());
        };
        let (reply_tx, reply_rx) = oneshot::channel();
        if release.send(reply_tx).is_err() {
            // The term already ended; the lease is not renewed by us any more.
            return Ok(());
        }
        reply_rx.await.unwrap_or(Ok(()))
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        self.renewer.abort();
    }
}

/// One candidate's elector and its I/O.
struct Candidate<A> {
    api: Arc<A>,
    elector: Elector,
    call_timeout: Duration,
    /// The renew deadline of the last successful renewal, while leading.
    until: Option<Instant>,
    /// `leaseTransitions` of the last lease this candidate wrote.
    transitions: u32,
}

impl<A: LeaseApi> Candidate<A> {
    /// One round: read, decide, write, report. The deadline of this candidate's term if it
    /// leads afterwards.
    async fn round(&mut self) -> Option<Instant> {
        let observation = self.read().await;
        if let Observation::Failed(why) = &observation {
            tracing::warn!(identity = %self.elector.config().identity, "reading the lease failed: {why}");
        }
        let issued = Instant::now();
        let action = self
            .elector
            .decide(issued.into_std(), wall_ms(), observation);
        let outcome = match &action {
            Action::Wait => None,
            Action::Create(record) => Some(self.timed(self.api.create(record)).await),
            Action::Replace { version, record } => {
                Some(self.timed(self.api.replace(version, record)).await)
            }
        };
        if let Some(outcome) = outcome {
            if let Err(why) = &outcome {
                tracing::debug!(identity = %self.elector.config().identity, "{why}");
            }
            if let Ok((record, _)) = &outcome {
                self.transitions = record.transitions;
            }
            let succeeded = outcome.is_ok();
            self.elector.written(Instant::now().into_std(), outcome);
            if succeeded && self.elector.is_leader(Instant::now().into_std()) {
                // The elector's term runs from when the write was issued; ours mirrors it.
                self.until = Some(issued + self.elector.config().renew_deadline);
            }
        }
        if !self.elector.is_leader(Instant::now().into_std()) {
            self.until = None;
        }
        self.until
    }

    async fn read(&self) -> Observation {
        match timeout(self.call_timeout, self.api.get()).await {
            Ok(observation) => observation,
            Err(_) => Observation::Failed(format!(
                "reading the lease timed out after {:?}",
                self.call_timeout
            )),
        }
    }

    async fn timed(
        &self,
        write: impl Future<Output = Result<Versioned, WriteFailed>>,
    ) -> Result<Versioned, WriteFailed> {
        timeout(self.call_timeout, write).await.unwrap_or_else(|_| {
            Err(WriteFailed(format!(
                "the lease write timed out after {:?}",
                self.call_timeout
            )))
        })
    }

    /// Writes the lease as held by nobody if it still names us.
    async fn release(&self) -> Result<(), WriteFailed> {
        let identity = self.elector.config().identity.as_str();
        match self.read().await {
            Observation::Found((record, version)) if record.holder.as_deref() == Some(identity) => {
                let record = released(&record, wall_ms());
                self.timed(self.api.replace(&version, &record))
                    .await
                    .map(|_| ())
            }
            Observation::Found(_) | Observation::Missing => Ok(()),
            Observation::Failed(why) => Err(WriteFailed(format!(
                "could not read the lease to release it: {why}"
            ))),
        }
    }
}

/// The leader's loop: renew every retry period until a renewal misses the deadline, the
/// lease is seen taken, or a release is asked for.
async fn renew<A: LeaseApi>(
    mut candidate: Candidate<A>,
    mut ticker: Interval,
    mut until: Instant,
    term: watch::Sender<Term>,
    mut release: oneshot::Receiver<ReleaseReply>,
) {
    let identity = candidate.elector.config().identity.clone();
    loop {
        tokio::select! {
            biased;
            asked = &mut release => {
                // A dropped guard (no reply channel) stops renewing without writing.
                term.send_replace(Term::Lost);
                if let Ok(reply) = asked {
                    let outcome = candidate.release().await;
                    tracing::info!(%identity, "released the lease");
                    // The guard may be gone; then nobody waits for the answer.
                    let _ = reply.send(outcome);
                }
                return;
            }
            _ = ticker.tick() => {}
        }
        match candidate.round().await {
            Some(next) if Instant::now() < until => {
                until = next;
                term.send_replace(Term::Leading(until));
            }
            _ => {
                term.send_replace(Term::Lost);
                tracing::warn!(%identity, "lost the lease: no renewal within the renew deadline, or another holder");
                return;
            }
        }
    }
}

/// Milliseconds since the epoch by the wall clock, for the record's times (people read them;
/// expiry never uses them).
fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests;
