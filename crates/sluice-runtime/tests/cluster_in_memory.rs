//! Cluster mode's runtime side with in-memory transports: a job master deploys a keyed job to
//! two workers (task managers) that exchange records over byte channels, and the output is the
//! local run's, checkpoints included. A lost task manager fails the job over onto a
//! replacement.

use futures::future::BoxFuture;
use sluice_core::CheckpointId;
use sluice_runtime::cluster::wire::{Control, Deployment, UpKind};
use sluice_runtime::cluster::{
    ByteReceiver, ByteSender, DataPlane, OpenReceiver, OpenSender, RemoteTasks, TaskManagerGateway,
    TaskManagerSlots, TransportError, Worker,
};
use sluice_runtime::failover::RestartStrategy;
use sluice_runtime::metrics::{HistogramSnapshot, MetricSource, MetricsReport};
use sluice_runtime::prelude::*;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, mpsc};

const RECORDS: u64 = 200_000;

/// Sums values per key; the count per key at the end, keyed by `i % 101`.
fn build(
    env: &StreamEnvironment,
    checkpoints: &std::path::Path,
    paced: bool,
) -> CollectHandle<(u64, u64)> {
    env.set_parallelism(2);
    env.set_checkpoint_storage(checkpoints);
    env.enable_checkpointing(Duration::from_millis(20));
    env.set_restart_strategy(RestartStrategy::fixed_delay(3, Duration::from_millis(10)).unwrap());
    let records = Generator::new(|i| i).take(RECORDS);
    // Paced, the job is still running when a test stops a task manager.
    let records = if paced {
        records.rate_limit(200_000.0)
    } else {
        records
    };
    env.from_generator(records)
        .map(|i| (i % 101, 1u64))
        .key_by(|r: &(u64, u64)| r.0)
        .process(Totals::default())
        .collect()
}

/// Per key: the running total, checkpointed, emitted at the end of input. Publishes the
/// records it summed and its batch sizes as a metric source (a counter and a histogram).
#[derive(Clone, Default)]
struct Totals(HashMap<u64, u64>, Arc<Summed>);

#[derive(Default)]
struct Summed {
    records: AtomicU64,
    batches: Mutex<Option<HistogramSnapshot>>,
}

impl MetricSource for Summed {
    fn report(&self, out: &mut MetricsReport) {
        out.counter("summed_records", self.records.load(Ordering::Relaxed));
        if let Some(h) = self.batches.lock().unwrap().as_ref() {
            out.histogram("summed_batch_size", h);
        }
    }
}

impl Operator<(u64, u64)> for Totals {
    type Out = (u64, u64);
    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.1 = Arc::new(Summed::default());
        ctx.metrics().register_source("totals", self.1.clone());
        Ok(())
    }
    fn snapshot_state(
        &mut self,
        _: CheckpointId,
        _: &mut Collector<(u64, u64)>,
    ) -> Result<OperatorState, UserError> {
        let entries: Vec<(u64, u64)> = self.0.iter().map(|(k, n)| (*k, *n)).collect();
        Ok(OperatorState::from_entries(vec![
            sluice_core::codec::encode(&entries)?,
        ]))
    }
    fn initialize_state(&mut self, state: OperatorState) -> Result<(), UserError> {
        for entry in state.entries() {
            for (k, n) in sluice_core::codec::decode::<Vec<(u64, u64)>>(entry)? {
                *self.0.entry(k).or_insert(0) += n;
            }
        }
        Ok(())
    }
    fn process_batch(
        &mut self,
        batch: Vec<(u64, u64)>,
        _: &mut Collector<(u64, u64)>,
    ) -> Result<(), UserError> {
        self.1
            .records
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        self.1
            .batches
            .lock()
            .unwrap()
            .get_or_insert_with(|| HistogramSnapshot::new(vec![1.0, 64.0, 1024.0]))
            .observe(batch.len() as f64);
        for (k, n) in batch {
            *self.0.entry(k).or_insert(0) += n;
        }
        Ok(())
    }
    fn end_input(&mut self, out: &mut Collector<(u64, u64)>) -> Result<(), UserError> {
        for (&k, &n) in &self.0 {
            out.collect((k, n));
        }
        Ok(())
    }
}

fn expected() -> Vec<(u64, u64)> {
    let mut counts: HashMap<u64, u64> = HashMap::new();
    for i in 0..RECORDS {
        *counts.entry(i % 101).or_insert(0) += 1;
    }
    let mut v: Vec<_> = counts.into_iter().collect();
    v.sort();
    v
}

/// The two ends of one in-memory channel, each taken by whoever opens it.
type Ends = (
    Option<mpsc::Sender<Vec<u8>>>,
    Option<mpsc::Receiver<Vec<u8>>>,
);

/// Byte channels in memory, bounded, created by whichever end opens first.
#[derive(Default)]
struct MemoryPlane {
    channels: Mutex<HashMap<u64, Ends>>,
}

struct MemSender(mpsc::Sender<Vec<u8>>);
struct MemReceiver(mpsc::Receiver<Vec<u8>>);

impl ByteSender for MemSender {
    fn send(&mut self, bytes: Vec<u8>) -> BoxFuture<'_, Result<(), TransportError>> {
        Box::pin(async move {
            self.0
                .send(bytes)
                .await
                .map_err(|_| TransportError("receiver gone".into()))
        })
    }
    fn close(self: Box<Self>) -> BoxFuture<'static, Result<(), TransportError>> {
        Box::pin(async { Ok(()) })
    }
}

impl ByteReceiver for MemReceiver {
    fn recv(&mut self) -> BoxFuture<'_, Result<Option<Vec<u8>>, TransportError>> {
        Box::pin(async move { Ok(self.0.recv().await) })
    }
}

impl MemoryPlane {
    fn entry<R>(&self, channel: u64, f: impl FnOnce(&mut Ends) -> R) -> R {
        let mut map = self.channels.lock().unwrap();
        let e = map.entry(channel).or_insert_with(|| {
            let (tx, rx) = mpsc::channel(4);
            (Some(tx), Some(rx))
        });
        f(e)
    }
}

impl DataPlane for MemoryPlane {
    fn sender(&self, _peer: &str, _addr: &str, channel: u64) -> OpenSender {
        let tx = self.entry(channel, |e| e.0.take());
        Box::pin(async move {
            tx.map(|t| Box::new(MemSender(t)) as Box<dyn ByteSender>)
                .ok_or_else(|| TransportError(format!("channel {channel} opened twice")))
        })
    }
    fn receiver(&self, _peer: &str, _addr: &str, channel: u64) -> OpenReceiver {
        let rx = self.entry(channel, |e| e.1.take());
        Box::pin(async move {
            rx.map(|r| Box::new(MemReceiver(r)) as Box<dyn ByteReceiver>)
                .ok_or_else(|| TransportError(format!("channel {channel} opened twice")))
        })
    }
}

/// Task managers in this process, each with its own copy of the job (as its own binary would
/// build it) and its own collected output.
#[derive(Default)]
struct Cluster {
    workers: Mutex<Vec<(String, Arc<Worker>)>>,
    outputs: Mutex<Vec<CollectHandle<(u64, u64)>>>,
    registered: Notify,
    deployed: Notify,
    paced: bool,
    deployments: Mutex<Vec<(String, usize)>>,
    /// What crossed the job master, as encoded for the wire.
    crossed: Mutex<Crossed>,
}

/// What crossed between the job master and the task managers.
#[derive(Clone, Debug, Default)]
struct Crossed {
    /// Checkpoint acknowledgements, and the list or keyed entries they carried.
    acks: u64,
    acked_entries: u64,
    /// The state files task managers reported writing.
    written: u64,
    /// Deployments that restore a checkpoint, the state handles they carried, and the entries.
    restoring: u64,
    handles: u64,
    deployed_entries: u64,
}

/// `value` as the transport carries it: encoded and decoded again.
fn over_the_wire<T: serde::Serialize + serde::de::DeserializeOwned>(value: &T) -> T {
    sluice_core::codec::decode(&sluice_core::codec::encode(value).unwrap()).unwrap()
}

fn entries(state: &OperatorState) -> u64 {
    (state.entries().len() + state.keyed_entries().len()) as u64
}

impl Cluster {
    fn worker(&self, tm: &str) -> Result<Arc<Worker>, TransportError> {
        self.workers
            .lock()
            .unwrap()
            .iter()
            .find(|(n, _)| n == tm)
            .map(|(_, w)| w.clone())
            .ok_or_else(|| TransportError(format!("no task manager {tm}")))
    }

    /// Starts a task manager named `name` whose reports reach `remote`.
    fn start_task_manager(
        self: &Arc<Self>,
        checkpoints: &std::path::Path,
        name: &str,
        plane: Arc<MemoryPlane>,
        remote: Arc<RemoteTasks>,
    ) {
        let env = StreamEnvironment::new();
        let out = build(&env, checkpoints, self.paced);
        self.start_worker(name, &env, out, plane, remote);
    }

    /// Starts task manager `name` running the job built on `env`, whose output is `out`.
    fn start_worker(
        self: &Arc<Self>,
        name: &str,
        env: &StreamEnvironment,
        out: CollectHandle<(u64, u64)>,
        plane: Arc<MemoryPlane>,
        remote: Arc<RemoteTasks>,
    ) {
        let job = env.worker_job("cluster").unwrap();
        let (up_tx, mut up) = Worker::up_channel();
        let worker = Worker::new(job, plane, up_tx);
        let cluster = self.clone();
        tokio::spawn(async move {
            while let Some(msg) = up.recv().await {
                let msg = over_the_wire(&msg);
                if let UpKind::Ack {
                    states, written, ..
                } = &msg.kind
                {
                    let mut c = cluster.crossed.lock().unwrap();
                    c.acks += 1;
                    c.acked_entries += states.iter().map(|(_, _, s)| entries(s)).sum::<u64>();
                    c.written += written.len() as u64;
                }
                remote.up(msg).await;
            }
        });
        self.outputs.lock().unwrap().push(out);
        self.workers
            .lock()
            .unwrap()
            .push((name.to_string(), worker));
        self.registered.notify_waiters();
    }
}

struct Gateway(Arc<Cluster>);

impl TaskManagerGateway for Gateway {
    fn wait_for_slots(&self, slots: usize) -> BoxFuture<'_, Result<Vec<TaskManagerSlots>, String>> {
        Box::pin(async move {
            loop {
                let registered = self.0.registered.notified();
                let tms: Vec<TaskManagerSlots> = self
                    .0
                    .workers
                    .lock()
                    .unwrap()
                    .iter()
                    .map(|(n, _)| TaskManagerSlots {
                        name: n.clone(),
                        slots: 1,
                        data_address: format!("mem://{n}"),
                    })
                    .collect();
                if tms.len() >= slots {
                    return Ok(tms);
                }
                registered.await;
            }
        })
    }
    fn deploy(&self, tm: &str, d: Deployment) -> BoxFuture<'_, Result<(), TransportError>> {
        let tm = tm.to_string();
        Box::pin(async move {
            self.0
                .deployments
                .lock()
                .unwrap()
                .push((tm.clone(), d.tasks.len()));
            let mut d = over_the_wire(&d);
            if d.restored_from.is_some() {
                let mut c = self.0.crossed.lock().unwrap();
                c.restoring += 1;
                c.handles += d.deferred.len() as u64;
                c.deployed_entries += d.states.iter().map(|(_, _, s)| entries(s)).sum::<u64>();
            }
            // As sluice-node's task manager service does.
            let worker = self.0.worker(&tm)?;
            worker
                .fetch_restored(&mut d)
                .await
                .map_err(|e| TransportError(e.to_string()))?;
            let deployed = worker.deploy(d).map_err(|e| TransportError(e.to_string()));
            self.0.deployed.notify_waiters();
            deployed
        })
    }
    fn control(&self, tm: &str, c: Control) -> BoxFuture<'_, Result<(), TransportError>> {
        let tm = tm.to_string();
        Box::pin(async move {
            self.0.worker(&tm)?.control(c).await;
            Ok(())
        })
    }
    fn cancel(
        &self,
        tm: &str,
        epoch: u64,
        attempt: u32,
        tasks: Vec<usize>,
    ) -> BoxFuture<'_, Result<(), TransportError>> {
        let tm = tm.to_string();
        Box::pin(async move {
            self.0.worker(&tm)?.cancel(epoch, attempt, &tasks);
            Ok(())
        })
    }
}

fn collected(cluster: &Cluster) -> Vec<(u64, u64)> {
    let mut all: Vec<(u64, u64)> = cluster
        .outputs
        .lock()
        .unwrap()
        .iter()
        .flat_map(|h| h.take())
        .collect();
    all.sort();
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_split_over_two_task_managers_gives_the_local_output() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = Arc::new(Cluster::default());
    let plane = Arc::new(MemoryPlane::default());
    let remote = RemoteTasks::new(Arc::new(Gateway(cluster.clone())), 7);
    let env = StreamEnvironment::new();
    let _unused_on_the_master = build(&env, dir.path(), false);
    let handle = env.submit_remote("cluster", remote.clone()).unwrap();
    cluster.start_task_manager(dir.path(), "tm-a", plane.clone(), remote.clone());
    cluster.start_task_manager(dir.path(), "tm-b", plane.clone(), remote.clone());
    let result = handle.await.unwrap();
    assert_eq!(collected(&cluster), expected());
    // Both task managers ran part of the job: one slot each, parallelism 2.
    let deployed = cluster.deployments.lock().unwrap().clone();
    assert!(
        deployed.iter().any(|(tm, _)| tm == "tm-a") && deployed.iter().any(|(tm, _)| tm == "tm-b"),
        "{deployed:?}"
    );
    assert_eq!(result.restarts, 0);
    // The job master's metrics hold the task managers' counters.
    assert_eq!(
        result.metrics.operator("Source: Generator").records_out,
        RECORDS
    );
    // ... and what the operators' metric sources report there: counters and histograms.
    let summers: Vec<_> = result
        .metrics
        .subtasks
        .iter()
        .filter(|m| m.counters.contains_key("summed_records"))
        .collect();
    assert_eq!(summers.len(), 2, "{:?}", result.metrics);
    let summed: u64 = summers.iter().map(|m| m.counters["summed_records"]).sum();
    assert_eq!(summed, RECORDS);
    let observed: u64 = summers
        .iter()
        .map(|m| m.histograms["summed_batch_size"].count())
        .sum();
    assert!(observed > 0, "{summers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_task_manager_fails_the_job_over_to_a_replacement() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let dir = tempfile::tempdir().unwrap();
    let cluster = Arc::new(Cluster {
        paced: true,
        ..Cluster::default()
    });
    let plane = Arc::new(MemoryPlane::default());
    let remote = RemoteTasks::new(Arc::new(Gateway(cluster.clone())), 7);
    let env = StreamEnvironment::new();
    let _unused = build(&env, dir.path(), true);
    let handle = env.submit_remote("cluster", remote.clone()).unwrap();
    cluster.start_task_manager(dir.path(), "tm-a", plane.clone(), remote.clone());
    cluster.start_task_manager(dir.path(), "tm-b", plane.clone(), remote.clone());
    // Once the first deployment is out, tm-b "dies": its tasks stop and it leaves.
    let first = loop {
        let deployed = cluster.deployed.notified();
        let n = cluster.deployments.lock().unwrap().len();
        if n >= 2 {
            break n;
        }
        deployed.await;
    };
    let lost = cluster.worker("tm-b").unwrap();
    lost.cancel_all();
    cluster.workers.lock().unwrap().retain(|(n, _)| n != "tm-b");
    remote.task_manager_lost("tm-b", "killed by the test");
    cluster.start_task_manager(dir.path(), "tm-c", plane.clone(), remote.clone());
    let result = handle.await.unwrap();
    assert!(result.restarts >= 1);
    assert!(cluster.deployments.lock().unwrap().len() > first);
    // Totals are checkpointed and emitted at the end of input: an attempt that ended before
    // the loss may have emitted them already, but every total emitted is the exact one (an
    // upsert of each key's total is exactly-once).
    let mut totals = collected(&cluster);
    totals.dedup();
    assert_eq!(totals, expected());
    // No state crossed the job master: task managers wrote their files and sent handles, and
    // the failover's deployments sent handles back, which the task managers read.
    let crossed = cluster.crossed.lock().unwrap().clone();
    assert!(crossed.acks > 0 && crossed.written > 0, "{crossed:?}");
    assert_eq!(crossed.acked_entries, 0, "{crossed:?}");
    if crossed.restoring > 0 {
        assert!(crossed.handles > 0, "{crossed:?}");
        assert_eq!(crossed.deployed_entries, 0, "{crossed:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_crosses_the_job_master_as_handles_and_a_failover_reads_it_on_the_task_managers() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = Arc::new(Cluster {
        paced: true,
        ..Cluster::default()
    });
    let plane = Arc::new(MemoryPlane::default());
    let remote = RemoteTasks::new(Arc::new(Gateway(cluster.clone())), 7);
    let env = StreamEnvironment::new();
    let _unused = build(&env, dir.path(), true);
    let handle = env.submit_remote("cluster", remote.clone()).unwrap();
    cluster.start_task_manager(dir.path(), "tm-a", plane.clone(), remote.clone());
    cluster.start_task_manager(dir.path(), "tm-b", plane.clone(), remote.clone());
    // A checkpoint completes while the job runs; then tm-b dies and tm-c replaces it.
    let mut completed = None;
    for _ in 0..100 {
        if let Ok(pending) = handle.trigger_checkpoint().await
            && let Ok(id) = pending.completed().await
        {
            completed = Some(id);
            break;
        }
    }
    assert!(completed.is_some(), "no checkpoint completed");
    let lost = cluster.worker("tm-b").unwrap();
    lost.cancel_all();
    cluster.workers.lock().unwrap().retain(|(n, _)| n != "tm-b");
    remote.task_manager_lost("tm-b", "killed by the test");
    cluster.start_task_manager(dir.path(), "tm-c", plane.clone(), remote.clone());
    let result = handle.await.unwrap();
    assert!(result.restarts >= 1);
    let mut totals = collected(&cluster);
    totals.dedup();
    assert_eq!(totals, expected());
    let crossed = cluster.crossed.lock().unwrap().clone();
    // Every acknowledgement: handles to the files its task manager wrote, no entries.
    assert!(crossed.acks > 0, "{crossed:?}");
    assert!(crossed.written >= crossed.acks, "{crossed:?}");
    assert_eq!(crossed.acked_entries, 0, "{crossed:?}");
    // The failover restored a checkpoint from handles, which the task managers read.
    assert!(crossed.restoring > 0 && crossed.handles > 0, "{crossed:?}");
    assert_eq!(crossed.deployed_entries, 0, "{crossed:?}");
}

/// A checkpoint storage that counts the state files written through it.
#[derive(Debug)]
struct Counting {
    inner: sluice_runtime::storage::LocalCheckpointStorage,
    state_files: std::sync::atomic::AtomicU64,
}

impl Counting {
    fn new(dir: &std::path::Path) -> Arc<Self> {
        Arc::new(Counting {
            inner: sluice_runtime::storage::LocalCheckpointStorage::new(
                dir.to_path_buf(),
                std::num::NonZeroUsize::new(3).unwrap(),
            ),
            state_files: Default::default(),
        })
    }
    fn written(&self) -> u64 {
        self.state_files.load(std::sync::atomic::Ordering::SeqCst)
    }
}

use sluice_runtime::storage::{
    CheckpointMetadata, CheckpointStorage, CoordinatorStateHandle, RestoreOutcome,
    RestoredCheckpoint, StateFileHandle, StorageError,
};

impl CheckpointStorage for Counting {
    fn location(&self) -> String {
        self.inner.location()
    }
    fn initialize(&self) -> BoxFuture<'_, Result<Vec<CheckpointId>, StorageError>> {
        self.inner.initialize()
    }
    fn write_state(
        &self,
        id: CheckpointId,
        node: sluice_core::NodeId,
        subtask: usize,
        payload: Vec<u8>,
    ) -> BoxFuture<'_, Result<StateFileHandle, StorageError>> {
        self.state_files
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.write_state(id, node, subtask, payload)
    }
    fn write_coordinator_state(
        &self,
        id: CheckpointId,
        node: sluice_core::NodeId,
        payload: Vec<u8>,
    ) -> BoxFuture<'_, Result<CoordinatorStateHandle, StorageError>> {
        self.inner.write_coordinator_state(id, node, payload)
    }
    fn complete(
        &self,
        metadata: CheckpointMetadata,
    ) -> BoxFuture<'_, Result<Vec<CheckpointId>, StorageError>> {
        self.inner.complete(metadata)
    }
    fn discard(&self, id: CheckpointId) -> BoxFuture<'_, Result<(), StorageError>> {
        self.inner.discard(id)
    }
    fn completed(&self) -> BoxFuture<'_, Result<Vec<CheckpointId>, StorageError>> {
        self.inner.completed()
    }
    fn latest_valid<'a>(
        &'a self,
        job_fingerprint: &'a str,
    ) -> BoxFuture<'a, Result<RestoreOutcome, StorageError>> {
        self.inner.latest_valid(job_fingerprint)
    }
    fn read_state<'a>(
        &'a self,
        id: CheckpointId,
        handle: &'a StateFileHandle,
    ) -> BoxFuture<'a, Result<Vec<u8>, StorageError>> {
        self.inner.read_state(id, handle)
    }
    fn load<'a>(
        &'a self,
        id: CheckpointId,
        job_fingerprint: &'a str,
    ) -> BoxFuture<'a, Result<RestoredCheckpoint, StorageError>> {
        self.inner.load(id, job_fingerprint)
    }
    fn write_shared<'a>(
        &'a self,
        key: &'a str,
        path: &'a std::path::Path,
    ) -> BoxFuture<'a, Result<(), StorageError>> {
        self.inner.write_shared(key, path)
    }
    fn delete_shared<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StorageError>> {
        self.inner.delete_shared(key)
    }
    fn fetch_shared<'a>(
        &'a self,
        key: &'a str,
        path: &'a std::path::Path,
    ) -> BoxFuture<'a, Result<(), StorageError>> {
        self.inner.fetch_shared(key, path)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_managers_write_their_state_files_and_the_job_master_only_the_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = Arc::new(Cluster::default());
    let plane = Arc::new(MemoryPlane::default());
    let remote = RemoteTasks::new(Arc::new(Gateway(cluster.clone())), 7);
    let master_storage = Counting::new(dir.path());
    let env = StreamEnvironment::new();
    let _unused = build(&env, dir.path(), false);
    env.set_checkpoint_storage_backend(master_storage.clone());
    let handle = env.submit_remote("cluster", remote.clone()).unwrap();
    let worker_storage = Counting::new(dir.path());
    for name in ["tm-a", "tm-b"] {
        let env = StreamEnvironment::new();
        let out = build(&env, dir.path(), false);
        env.set_checkpoint_storage_backend(worker_storage.clone());
        cluster.start_worker(name, &env, out, plane.clone(), remote.clone());
    }
    let result = handle.await.unwrap();
    assert!(result.completed_checkpoints >= 1);
    assert_eq!(
        master_storage.written(),
        0,
        "the job master wrote state files"
    );
    assert!(
        worker_storage.written() >= 4,
        "{}",
        worker_storage.written()
    );
    // The checkpoints they make up are whole: a local run restores the last one (every file
    // it lists read back and its checksum verified).
    let env = StreamEnvironment::new();
    let _out = build(&env, dir.path(), false);
    env.resume_from_latest_checkpoint();
    let resumed = env.execute("cluster").await.unwrap();
    assert_eq!(resumed.restored_from, result.last_checkpoint);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_user_code_on_a_task_manager_fails_the_job_with_its_message() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = Arc::new(Cluster::default());
    let plane = Arc::new(MemoryPlane::default());
    let remote = RemoteTasks::new(Arc::new(Gateway(cluster.clone())), 7);
    let failing = |env: &StreamEnvironment| {
        env.set_parallelism(2);
        env.set_checkpoint_storage(dir.path());
        env.from_generator(Generator::new(|i| i).take(RECORDS))
            .map(|i: u64| {
                assert!(i != 12_345, "record 12345 is poison");
                (i % 101, 1u64)
            })
            .key_by(|r: &(u64, u64)| r.0)
            .process(Totals::default())
            .collect()
    };
    let env = StreamEnvironment::new();
    let _unused = failing(&env);
    let handle = env.submit_remote("cluster", remote.clone()).unwrap();
    for name in ["tm-a", "tm-b"] {
        let env = StreamEnvironment::new();
        let out = failing(&env);
        cluster.start_worker(name, &env, out, plane.clone(), remote.clone());
    }
    // The panic, not its consequence on the other task manager (a task whose upstream channel
    // closed early), names the failure.
    let err = handle.await.unwrap_err();
    let failure = err
        .task_failure()
        .unwrap_or_else(|| panic!("not a task failure: {err}"));
    assert!(failure.message.contains("record 12345 is poison"), "{err}");
    assert_eq!(failure.operator_name, "Map");
}

/// A two-input job over two task managers: both inputs rebalanced (so their channels cross
/// between the task managers), merged by a co-map, then counted per key.
fn build_two_input(env: &StreamEnvironment) -> CollectHandle<(u64, u64)> {
    env.set_parallelism(2);
    let first = env
        .from_generator(Generator::new(|i| i).take(RECORDS))
        .rebalance();
    let second = env
        .from_generator(Generator::new(|i| i).take(RECORDS))
        .rebalance();
    first
        .connect(&second)
        .map(|i: u64| (i % 101, 1u64), |i: u64| (i % 101, 1u64))
        .key_by(|r: &(u64, u64)| r.0)
        .process(Totals::default())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_input_job_split_over_two_task_managers_gives_the_local_output() {
    let cluster = Arc::new(Cluster::default());
    let plane = Arc::new(MemoryPlane::default());
    let remote = RemoteTasks::new(Arc::new(Gateway(cluster.clone())), 7);
    let env = StreamEnvironment::new();
    let _unused_on_the_master = build_two_input(&env);
    let handle = env.submit_remote("cluster", remote.clone()).unwrap();
    for tm in ["tm-a", "tm-b"] {
        let env = StreamEnvironment::new();
        let out = build_two_input(&env);
        cluster.start_worker(tm, &env, out, plane.clone(), remote.clone());
    }
    let result = handle.await.unwrap();
    assert_eq!(result.restarts, 0);
    let want: Vec<(u64, u64)> = expected().into_iter().map(|(k, n)| (k, 2 * n)).collect();
    assert_eq!(collected(&cluster), want);
}
