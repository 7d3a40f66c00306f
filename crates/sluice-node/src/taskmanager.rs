//! The task manager process: binds its data plane and control service, registers its slots
//! with the job master, sends heartbeats, runs what is deployed to it through the runtime's
//! [`Worker`], and forwards what its tasks send up, in order.
//!
//! When the job master stops answering for the heartbeat timeout, every task here stops and
//! the task manager registers again (with the same job master restarted, or its successor),
//! which then deploys from the latest completed checkpoint. When the job master says the job
//! ended, the task manager returns.

use crate::NodeError;
use crate::config::NodeConfig;
use crate::health::Health;
use crate::plane::{NetDataPlane, SharedPlane};
use sluice_control::messages::*;
use sluice_control::{JobMasterClient, TaskManager, TaskManagerServer, serve};
use sluice_runtime::cluster::wire::{Control, Deployment, Up};
use sluice_runtime::cluster::{Worker, WorkerJob};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tonic::Status;

/// The task-manager service the job master calls.
struct Service {
    worker: Arc<Worker>,
    finished: watch::Sender<bool>,
}

impl TaskManager for Service {
    async fn deploy(&self, d: DeployTask) -> Result<Ack, Status> {
        let mut deployment: Deployment = sluice_core::codec::decode(&d.descriptor)
            .map_err(|e| Status::invalid_argument(format!("undecodable deployment: {e}")))?;
        self.worker
            .fetch_restored(&mut deployment)
            .await
            .map_err(|e| Status::failed_precondition(e.to_string()))?;
        self.worker
            .deploy(deployment)
            .map_err(|e| Status::failed_precondition(e.to_string()))?;
        Ok(Ack {})
    }

    async fn cancel(&self, c: CancelTasks) -> Result<Ack, Status> {
        let epoch = c.fence.map_or(0, |f| f.epoch);
        let tasks: Vec<usize> = c.tasks.iter().map(|t| *t as usize).collect();
        self.worker.cancel(epoch, c.attempt, &tasks);
        Ok(Ack {})
    }

    async fn heartbeat(&self, h: Heartbeat) -> Result<Heartbeat, Status> {
        if h.job_finished {
            self.finished.send_replace(true);
        }
        Ok(h)
    }

    async fn control(&self, c: ControlMessage) -> Result<Ack, Status> {
        let control: Control = sluice_core::codec::decode(&c.payload)
            .map_err(|e| Status::invalid_argument(format!("undecodable control message: {e}")))?;
        // A message for a task that no longer runs here is dropped, as a local mailbox of a
        // stopped task would drop it.
        self.worker.control(control).await;
        Ok(Ack {})
    }
}

/// Runs a task manager for `job` until the job master says the job ended.
pub(crate) async fn run(
    job: WorkerJob,
    config: NodeConfig,
    health: Health,
) -> Result<(), NodeError> {
    let (config, health) = (&config, &health);
    let secret = config
        .secret
        .clone()
        .ok_or_else(|| NodeError::Setup("a task manager needs SLUICE_SECRET".into()))?;
    let jm = config
        .job_manager
        .clone()
        .ok_or_else(|| NodeError::Setup("a task manager needs SLUICE_JOBMANAGER".into()))?;
    let name = config.task_manager_id.clone();
    let plane = NetDataPlane::bind(&name, config.data_addr, config.net_config(secret.clone()))
        .await
        .map_err(|e| NodeError::Setup(format!("data plane on {}: {e}", config.data_addr)))?;
    let (up_tx, up_rx) = Worker::up_channel();
    let worker = Worker::new(job, Arc::new(SharedPlane(plane.clone())), up_tx);
    let epoch = Arc::new(AtomicU64::new(0));
    let (finished_tx, mut finished) = watch::channel(false);
    let server = serve(
        config.rpc_addr,
        TaskManagerServer::new(Service {
            worker: worker.clone(),
            finished: finished_tx,
        }),
        secret.clone(),
    )
    .await
    .map_err(|e| NodeError::Setup(format!("task manager service on {}: {e}", config.rpc_addr)))?;
    let control_address = config.advertise(server.local_addr());
    let data_address = config.advertise(plane.local_addr());
    tracing::info!(task_manager = %name, control = %control_address, data = %data_address, "task manager listening");
    println!("sluice task manager {name} listening on {control_address} (data {data_address})");
    let client = JobMasterClient::new(&format!("http://{jm}"), &secret)
        .map_err(|e| NodeError::Setup(format!("job master address {jm}: {e}")))?;
    let forwarder = tokio::spawn(forward_up(up_rx, client.clone(), name.clone()));
    let registration = RegisterTaskManager {
        task_manager: name.clone(),
        slots: config.slots,
        data_address,
        control_address,
    };
    let outcome = tokio::select! {
        r = stay_registered(client, registration, &worker, &epoch, config, health) => r,
        _ = finished.wait_for(|f| *f) => Ok(()),
    };
    worker.cancel_all();
    forwarder.abort();
    drop(server);
    tracing::info!(task_manager = %name, "task manager stops: the job ended");
    outcome
}

/// Registers, then heartbeats; registers again whenever the job master is lost. Returns only
/// on a setup error.
async fn stay_registered(
    mut client: JobMasterClient,
    registration: RegisterTaskManager,
    worker: &Arc<Worker>,
    epoch: &AtomicU64,
    config: &NodeConfig,
    health: &Health,
) -> Result<(), NodeError> {
    let mut backoff = Duration::from_millis(100);
    loop {
        let registered = match client.register(registration.clone()).await {
            Ok(r) => r,
            Err(e) => {
                health.set_ready(false);
                tracing::info!(error = %e.message(), "job master not reachable; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
                continue;
            }
        };
        backoff = Duration::from_millis(100);
        let fence = registered.fence.unwrap_or_default();
        let previous = epoch.swap(fence.epoch, Ordering::SeqCst);
        if previous != fence.epoch && previous != 0 {
            tracing::warn!(
                old = previous,
                new = fence.epoch,
                "a new job master took over; stopping the old one's tasks"
            );
            // Only the old job master's tasks: the new one may have deployed here already,
            // before this answer was read.
            worker.cancel_before_epoch(fence.epoch);
        }
        health.set_ready(true);
        tracing::info!(epoch = fence.epoch, "registered with the job master");
        let interval = Duration::from_millis(registered.heartbeat_interval_ms.max(1))
            .min(config.heartbeat_interval);
        let timeout = Duration::from_millis(registered.heartbeat_timeout_ms.max(1));
        let mut last_ok = tokio::time::Instant::now();
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            let beat = Heartbeat {
                fence: Some(fence),
                task_manager: registration.task_manager.clone(),
                job_finished: false,
            };
            match tokio::time::timeout(
                interval.max(Duration::from_millis(200)),
                client.heartbeat(beat),
            )
            .await
            {
                Ok(Ok(_)) => last_ok = tokio::time::Instant::now(),
                Ok(Err(e))
                    if matches!(
                        e.code(),
                        tonic::Code::NotFound | tonic::Code::FailedPrecondition
                    ) =>
                {
                    tracing::warn!(error = %e.message(), "the job master forgot this task manager; registering again");
                    worker.cancel_all();
                    break;
                }
                _ => {}
            }
            if last_ok.elapsed() > timeout {
                tracing::warn!(
                    timeout_ms = timeout.as_millis() as u64,
                    "job master lost; stopping every task and registering again"
                );
                worker.cancel_all();
                health.set_ready(false);
                break;
            }
        }
    }
}

/// Sends what the tasks report to the job master, one message at a time, in order.
async fn forward_up(mut up: mpsc::Receiver<Up>, mut client: JobMasterClient, name: String) {
    // No filtering by epoch here: a deployment may arrive before the registration's answer
    // does, and the job master refuses what does not carry its own epoch.
    while let Some(msg) = up.recv().await {
        let payload = match sluice_core::codec::encode(&msg) {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(error = %e, "cannot encode a message for the job master");
                continue;
            }
        };
        let size = payload.len();
        let sent = client
            .up(UpMessage {
                fence: Some(FenceMsg {
                    epoch: msg.epoch,
                    attempt: 0,
                }),
                task_manager: name.clone(),
                payload,
            })
            .await;
        match sent {
            Ok(_) => {}
            // The job master is gone or replaced; its successor redeploys from a checkpoint.
            Err(e) if e.code() == tonic::Code::Unavailable => {
                tracing::debug!(error = %e, "a message for the job master was dropped");
            }
            // Anything else (a message over the size limit, a refused fence) is worth seeing:
            // a lost acknowledgement leaves its checkpoint to time out.
            Err(e) => {
                tracing::warn!(error = %e, bytes = size, "the job master did not take a message");
            }
        }
    }
}
