//! The job master process: serves the control plane's job-master service, keeps the registry
//! of task managers (slots, addresses, heartbeats), and runs the job with its tasks deployed
//! to them through the runtime's [`RemoteTasks`].
//!
//! A task manager is lost when it misses heartbeats for the timeout or a call to it fails
//! at the transport; its tasks then fail and the runtime fails over from the last completed
//! checkpoint onto the task managers left, waiting for a replacement when the slots run short.

use crate::NodeError;
use crate::config::NodeConfig;
use crate::health::Health;
use futures::future::BoxFuture;
use sluice_cluster::heartbeat::HeartbeatMonitor;
use sluice_control::messages::*;
use sluice_control::{JobMaster, JobMasterServer, TaskManagerClient, serve};
use sluice_net::auth::Secret;
use sluice_runtime::cluster::wire::{Control, Deployment, Up};
use sluice_runtime::cluster::{RemoteTasks, TaskManagerGateway, TaskManagerSlots, TransportError};
use sluice_runtime::{JobHandle, StreamEnvironment};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;
use tonic::Status;

/// A registered task manager.
struct Registered {
    name: String,
    slots: u32,
    data_address: String,
    client: TaskManagerClient,
}

/// What the job master knows of its task managers.
struct Registry {
    epoch: u64,
    secret: Secret,
    heartbeat_interval: Duration,
    heartbeat_timeout: Duration,
    slot_wait: Duration,
    tms: Mutex<Vec<Registered>>,
    monitor: Mutex<HeartbeatMonitor<String>>,
    changed: Notify,
    remote: OnceLock<Arc<RemoteTasks>>,
}

impl Registry {
    fn lock_tms(&self) -> std::sync::MutexGuard<'_, Vec<Registered>> {
        self.tms.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn fence(&self) -> Option<FenceMsg> {
        Some(FenceMsg {
            epoch: self.epoch,
            attempt: 0,
        })
    }

    fn client(&self, tm: &str) -> Result<TaskManagerClient, TransportError> {
        self.lock_tms()
            .iter()
            .find(|t| t.name == tm)
            .map(|t| t.client.clone())
            .ok_or_else(|| TransportError(format!("task manager '{tm}' is not registered")))
    }

    /// Task manager `tm` is gone: forget it and fail its tasks.
    fn lost(&self, tm: &str, reason: &str) {
        let removed = {
            let mut tms = self.lock_tms();
            let before = tms.len();
            tms.retain(|t| t.name != tm);
            before != tms.len()
        };
        self.monitor
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&tm.to_string());
        if removed {
            tracing::warn!(task_manager = %tm, %reason, "task manager lost");
        }
        if let Some(remote) = self.remote.get() {
            remote.task_manager_lost(tm, reason);
        }
        self.changed.notify_waiters();
    }

    /// A call to `tm` failed: a transport failure means the task manager is gone.
    fn call_failed(&self, tm: &str, status: &Status) -> TransportError {
        if matches!(
            status.code(),
            tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled
        ) {
            self.lost(tm, &format!("a call failed: {}", status.message()));
        }
        TransportError(format!("task manager '{tm}': {status}"))
    }
}

/// The job-master service task managers call.
struct Service(Arc<Registry>);

impl JobMaster for Service {
    async fn register(
        &self,
        r: RegisterTaskManager,
    ) -> Result<sluice_control::messages::Registered, Status> {
        let reg = &self.0;
        if r.slots == 0 {
            return Err(Status::invalid_argument(format!(
                "task manager '{}' offers no slot",
                r.task_manager
            )));
        }
        let client = TaskManagerClient::new(&format!("http://{}", r.control_address), &reg.secret)
            .map_err(|e| {
                Status::invalid_argument(format!("control address {}: {e}", r.control_address))
            })?;
        let again = {
            let mut tms = reg.lock_tms();
            let before = tms.len();
            tms.retain(|t| t.name != r.task_manager);
            before != tms.len()
        };
        if again {
            // It stopped its tasks before registering again (it lost this job master for a
            // while): they fail over like those of a lost task manager.
            if let Some(remote) = reg.remote.get() {
                remote.task_manager_lost(&r.task_manager, "it registered again");
            }
        }
        {
            let mut tms = reg.lock_tms();
            tms.push(Registered {
                name: r.task_manager.clone(),
                slots: r.slots,
                data_address: r.data_address.clone(),
                client,
            });
        }
        reg.monitor
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .heard(r.task_manager.clone(), Instant::now().into_std());
        tracing::info!(task_manager = %r.task_manager, slots = r.slots, data = %r.data_address, "task manager registered");
        reg.changed.notify_waiters();
        Ok(sluice_control::messages::Registered {
            fence: reg.fence(),
            heartbeat_interval_ms: u64::try_from(reg.heartbeat_interval.as_millis())
                .unwrap_or(u64::MAX),
            heartbeat_timeout_ms: u64::try_from(reg.heartbeat_timeout.as_millis())
                .unwrap_or(u64::MAX),
        })
    }

    async fn heartbeat(&self, h: Heartbeat) -> Result<Heartbeat, Status> {
        let known = self.0.lock_tms().iter().any(|t| t.name == h.task_manager);
        if !known {
            return Err(Status::not_found(format!(
                "task manager '{}' is not registered (it was lost); register again",
                h.task_manager
            )));
        }
        self.0
            .monitor
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .heard(h.task_manager.clone(), Instant::now().into_std());
        Ok(Heartbeat {
            fence: self.0.fence(),
            task_manager: h.task_manager,
            job_finished: false,
        })
    }

    async fn up(&self, u: UpMessage) -> Result<Ack, Status> {
        let up: Up = sluice_core::codec::decode(&u.payload).map_err(|e| {
            Status::invalid_argument(format!(
                "undecodable message from '{}': {e}",
                u.task_manager
            ))
        })?;
        if let Some(remote) = self.0.remote.get() {
            remote.up(up).await;
        }
        Ok(Ack {})
    }
}

/// The runtime's gateway to task managers, over gRPC.
struct Gateway(Arc<Registry>);

impl TaskManagerGateway for Gateway {
    fn wait_for_slots(&self, slots: usize) -> BoxFuture<'_, Result<Vec<TaskManagerSlots>, String>> {
        Box::pin(async move {
            let reg = &self.0;
            let deadline = Instant::now() + reg.slot_wait;
            loop {
                let changed = reg.changed.notified();
                let tms: Vec<TaskManagerSlots> = reg
                    .lock_tms()
                    .iter()
                    .map(|t| TaskManagerSlots {
                        name: t.name.clone(),
                        slots: t.slots,
                        data_address: t.data_address.clone(),
                    })
                    .collect();
                let offered: usize = tms.iter().map(|t| t.slots as usize).sum();
                if offered >= slots {
                    return Ok(tms);
                }
                tracing::info!(
                    needed = slots,
                    offered,
                    task_managers = tms.len(),
                    "waiting for task managers"
                );
                if tokio::time::timeout_at(deadline, changed).await.is_err() {
                    return Err(format!(
                        "the job needs {slots} task slots but after {} s the {} registered task \
                         managers offer {offered}; start more task managers or raise SLUICE_SLOTS",
                        reg.slot_wait.as_secs(),
                        tms.len()
                    ));
                }
            }
        })
    }

    fn deploy(&self, tm: &str, d: Deployment) -> BoxFuture<'_, Result<(), TransportError>> {
        let tm = tm.to_string();
        Box::pin(async move {
            let mut client = self.0.client(&tm)?;
            let descriptor =
                sluice_core::codec::encode(&d).map_err(|e| TransportError(e.to_string()))?;
            client
                .deploy(DeployTask {
                    fence: self.0.fence(),
                    descriptor,
                })
                .await
                .map(|_| ())
                .map_err(|s| self.0.call_failed(&tm, &s))
        })
    }

    fn control(&self, tm: &str, c: Control) -> BoxFuture<'_, Result<(), TransportError>> {
        let tm = tm.to_string();
        Box::pin(async move {
            let mut client = self.0.client(&tm)?;
            let payload =
                sluice_core::codec::encode(&c).map_err(|e| TransportError(e.to_string()))?;
            client
                .control(ControlMessage {
                    fence: self.0.fence(),
                    payload,
                })
                .await
                .map(|_| ())
                .map_err(|s| self.0.call_failed(&tm, &s))
        })
    }

    fn cancel(
        &self,
        tm: &str,
        _epoch: u64,
        attempt: u32,
        tasks: Vec<usize>,
    ) -> BoxFuture<'_, Result<(), TransportError>> {
        let tm = tm.to_string();
        Box::pin(async move {
            let mut client = self.0.client(&tm)?;
            client
                .cancel(CancelTasks {
                    fence: self.0.fence(),
                    tasks: tasks.into_iter().map(|t| t as u64).collect(),
                    attempt,
                })
                .await
                .map(|_| ())
                .map_err(|s| TransportError(format!("task manager '{tm}': {s}")))
        })
    }
}

/// What keeps a job master's cluster side running while its job runs: the control service,
/// the registry and the heartbeat watchdog. [`finish`](Self::finish) it once the job ended.
pub struct ClusterGuard {
    registry: Arc<Registry>,
    server: sluice_control::ServerHandle,
    watchdog: tokio::task::JoinHandle<()>,
    /// With a standby (`SLUICE_HA`): hands the lease over when the job ended.
    release: Option<tokio::sync::oneshot::Sender<tokio::sync::oneshot::Sender<()>>>,
}

impl std::fmt::Debug for ClusterGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterGuard")
            .field("epoch", &self.registry.epoch)
            .field("addr", &self.server.local_addr())
            .finish_non_exhaustive()
    }
}

impl ClusterGuard {
    /// Where the job master's control service listens.
    pub fn local_addr(&self) -> std::net::SocketAddr {
        self.server.local_addr()
    }

    /// Tells every task manager that the job ended (they shut down) and stops serving.
    pub async fn finish(self) {
        self.watchdog.abort();
        if let Some(release) = self.release {
            let (done, released) = tokio::sync::oneshot::channel();
            if release.send(done).is_ok() {
                let _ = released.await;
            }
        }
        let registry = self.registry;
        let clients: Vec<(String, TaskManagerClient)> = registry
            .lock_tms()
            .iter()
            .map(|t| (t.name.clone(), t.client.clone()))
            .collect();
        for (name, mut client) in clients {
            let told = client
                .heartbeat(Heartbeat {
                    fence: registry.fence(),
                    task_manager: name.clone(),
                    job_finished: true,
                })
                .await;
            if let Err(e) = told {
                tracing::debug!(task_manager = %name, error = %e, "could not tell a task manager the job ended");
            }
        }
        drop(self.server);
    }
}

/// Starts `env`'s job as the job master of a cluster: its tasks go to the task managers that
/// register.
pub(crate) async fn start(
    env: &StreamEnvironment,
    job_name: &str,
    config: &NodeConfig,
    health: &Health,
) -> Result<(JobHandle, ClusterGuard), NodeError> {
    let secret = config
        .secret
        .clone()
        .ok_or_else(|| NodeError::Setup("a job master needs SLUICE_SECRET".into()))?;
    let release = standby_until_leader().await?;
    // A new job master's epoch is above every earlier one's: the wall clock in milliseconds.
    let epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(1);
    let registry = Arc::new(Registry {
        epoch,
        secret: secret.clone(),
        heartbeat_interval: config.heartbeat_interval,
        heartbeat_timeout: config.heartbeat_timeout,
        slot_wait: config.slot_wait,
        tms: Mutex::new(Vec::new()),
        monitor: Mutex::new(HeartbeatMonitor::new(config.heartbeat_timeout)),
        changed: Notify::new(),
        remote: OnceLock::new(),
    });
    let remote = RemoteTasks::new(Arc::new(Gateway(registry.clone())), epoch);
    let _ = registry.remote.set(remote.clone());
    let server = serve(
        config.rpc_addr,
        JobMasterServer::new(Service(registry.clone()), epoch),
        secret,
    )
    .await
    .map_err(|e| NodeError::Setup(format!("job master service on {}: {e}", config.rpc_addr)))?;
    tracing::info!(addr = %server.local_addr(), epoch, "job master listening");
    let watchdog = {
        let registry = registry.clone();
        tokio::spawn(async move { watch_heartbeats(registry).await })
    };
    let handle = env.submit_remote(job_name, remote)?;
    health.set_ready(true);
    Ok((
        handle,
        ClusterGuard {
            registry,
            server,
            watchdog,
            release,
        },
    ))
}

/// The hand-over of a lease: send it a channel, and it answers once the lease was released.
type Release = tokio::sync::oneshot::Sender<tokio::sync::oneshot::Sender<()>>;

/// With `SLUICE_HA=kubernetes`: waits as a standby until this process holds the job master's
/// Lease, and from then on exits the process the moment it loses it (another job master may
/// take over at once). Without `SLUICE_HA`: nothing.
#[cfg(feature = "kubernetes")]
async fn standby_until_leader() -> Result<Option<Release>, NodeError> {
    let Some(election) = sluice_k8s::LeaderElection::from_env()
        .await
        .map_err(|e| NodeError::Setup(format!("leader election: {e}")))?
    else {
        return Ok(None);
    };
    tracing::info!("standby: waiting for the job master's lease");
    let leadership = election.acquire().await;
    tracing::info!(
        transitions = leadership.transitions(),
        "this job master leads"
    );
    let (release, released) = tokio::sync::oneshot::channel::<tokio::sync::oneshot::Sender<()>>();
    tokio::spawn(async move {
        tokio::select! {
            () = leadership.lost() => {
                tracing::error!("lost the job master's lease: stopping at once");
                std::process::exit(3);
            }
            done = released => {
                if let Err(e) = leadership.release().await {
                    tracing::warn!(error = ?e, "could not release the lease; the standby takes over when it expires");
                }
                if let Ok(done) = done {
                    let _ = done.send(());
                }
            }
        }
    });
    Ok(Some(release))
}

/// Without the `kubernetes` feature, `SLUICE_HA` cannot be honoured: say so.
#[cfg(not(feature = "kubernetes"))]
async fn standby_until_leader() -> Result<Option<Release>, NodeError> {
    match std::env::var("SLUICE_HA") {
        Ok(v) if !v.trim().is_empty() => Err(NodeError::Setup(format!(
            "SLUICE_HA={v} needs a build with sluice-node's `kubernetes` feature \
             (cargo build --features sluice-node/kubernetes)"
        ))),
        _ => Ok(None),
    }
}

/// Declares task managers lost once they missed heartbeats for the timeout.
async fn watch_heartbeats(registry: Arc<Registry>) {
    loop {
        let next = {
            let monitor = registry.monitor.lock().unwrap_or_else(|p| p.into_inner());
            monitor.next_deadline()
        };
        match next {
            // A peer expires once silent for *more* than the timeout: look just after.
            Some(deadline) => {
                tokio::time::sleep_until(Instant::from_std(deadline) + Duration::from_millis(1))
                    .await
            }
            None => registry.changed.notified().await,
        }
        let expired = registry
            .monitor
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .expired(Instant::now().into_std());
        for tm in expired {
            registry.lost(
                &tm,
                &format!(
                    "no heartbeat for {} ms",
                    registry.heartbeat_timeout.as_millis()
                ),
            );
        }
    }
}
