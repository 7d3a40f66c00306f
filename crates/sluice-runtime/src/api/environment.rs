//! [`StreamEnvironment`]: where a job is built, configured and executed.

use crate::api::source::{Generator, GeneratorReader, IterReader};
use crate::api::stream::DataStream;
use crate::checkpoint::CheckpointSettings;
use crate::cluster::{RemoteDeployer, RemoteTasks, WorkerJob};
use crate::error::JobError;
use crate::failover::{FailoverStrategy, RestartStrategy};
use crate::graph::erased::{TypedOutput, TypedSource, TypedSourceHead};
use crate::graph::{NodeKind, StreamGraph};
use crate::job::deploy::{Deployer, LocalDeployer};
use crate::job::submit::Submission;
use crate::job::{JobConfig, JobHandle, JobResult};
use crate::operator::{OperatorContext, SourceHead};
use crate::state::OperatorState;
use crate::storage::CheckpointStorage;
use crate::task::input::SourceReader;
use sluice_core::{Data, UserError};
use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// The entry point of a job: create streams from sources, transform them, then
/// [`execute`](StreamEnvironment::execute).
///
/// The environment is a cheap handle; streams keep a clone. Executing takes the graph built so
/// far, so the same environment can build and run another job afterwards.
///
/// ```
/// use sluice_runtime::prelude::*;
///
/// let env = StreamEnvironment::new();
/// env.set_parallelism(2);
/// let out = env.from_iter(1..=4u64).map(|x| x * x).filter(|x| x % 2 == 0).collect();
/// env.execute_blocking("squares").unwrap();
/// let mut v = out.take();
/// v.sort();
/// assert_eq!(v, vec![4, 16]);
/// ```
#[derive(Clone, Default)]
pub struct StreamEnvironment {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Default)]
struct Inner {
    config: JobConfig,
    graph: StreamGraph,
    checkpoints: Option<CheckpointSettings>,
    restart: Option<RestartStrategy>,
    failover: FailoverStrategy,
    storage_dir: Option<PathBuf>,
    storage_backend: Option<Arc<dyn CheckpointStorage>>,
    restore_from: Option<PathBuf>,
    resume_latest: bool,
}

impl StreamEnvironment {
    /// A new environment with the default [`JobConfig`].
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        sluice_core::sync::lock(&self.inner)
    }

    /// Whether `other` is this environment (a clone of it).
    pub(crate) fn same_as(&self, other: &StreamEnvironment) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    pub(crate) fn with_graph<R>(&self, f: impl FnOnce(&mut StreamGraph) -> R) -> R {
        f(&mut self.lock().graph)
    }

    /// The default parallelism of operators that do not set their own.
    pub fn set_parallelism(&self, parallelism: usize) -> &Self {
        self.lock().config.parallelism = parallelism;
        self
    }

    /// The number of key groups (upper bound of any parallelism). Default 128.
    pub fn set_max_parallelism(&self, max_parallelism: usize) -> &Self {
        self.lock().config.max_parallelism = max_parallelism;
        self
    }

    /// Records per batch. Default 1024.
    pub fn set_batch_size(&self, batch_size: usize) -> &Self {
        self.lock().config.batch_size = batch_size;
        self
    }

    /// Batches one channel buffers before its producer waits. Default 4.
    pub fn set_channel_capacity(&self, batches: usize) -> &Self {
        self.lock().config.channel_capacity = batches;
        self
    }

    /// Where keyed state lives (Flink's state backend): the heap by default, or the on-disk
    /// stores of a backend such as `sluice-rocksdb`'s `RocksDbStateBackend` for state larger
    /// than memory. Checkpoints of either restore with the other.
    ///
    /// ```
    /// use sluice_runtime::prelude::*;
    /// use sluice_runtime::state::MemoryStateBackend;
    ///
    /// let env = StreamEnvironment::new();
    /// env.set_state_backend(MemoryStateBackend::new(1 << 20));
    /// assert_eq!(env.config().state_backend.name(), "memory-store");
    /// ```
    pub fn set_state_backend(&self, backend: impl Into<crate::state::StateBackend>) -> &Self {
        self.lock().config.state_backend = backend.into();
        self
    }

    /// The current configuration.
    pub fn config(&self) -> JobConfig {
        self.lock().config.clone()
    }

    /// Takes a checkpoint every `interval`, with default settings otherwise (see
    /// [`CheckpointSettings::every`]); refine them with
    /// [`set_checkpoint_settings`](Self::set_checkpoint_settings).
    ///
    /// With checkpointing, a failed job restarts from its last completed checkpoint according to
    /// its restart strategy (by default exponential backoff from 1 s to 1 min, as Flink), and a
    /// bounded job ends with a final checkpoint, so that sinks commit everything exactly once.
    pub fn enable_checkpointing(&self, interval: Duration) -> &Self {
        self.lock().checkpoints = Some(CheckpointSettings::every(interval));
        self
    }

    /// Sets every checkpoint setting at once (and enables checkpointing).
    pub fn set_checkpoint_settings(&self, settings: CheckpointSettings) -> &Self {
        self.lock().checkpoints = Some(settings);
        self
    }

    /// Where checkpoints are written. Default: `./sluice-checkpoints/<job name>`.
    pub fn set_checkpoint_storage(&self, dir: impl Into<PathBuf>) -> &Self {
        self.lock().storage_dir = Some(dir.into());
        self
    }

    /// Writes checkpoints to `storage` instead of a local directory (it replaces
    /// [`set_checkpoint_storage`](Self::set_checkpoint_storage)): for example an object store
    /// through `sluice-object-store`, so that a job master started on another machine finds
    /// them (see [`resume_from_latest_checkpoint`](Self::resume_from_latest_checkpoint)).
    ///
    /// ```
    /// use sluice_runtime::prelude::*;
    /// use sluice_runtime::storage::LocalCheckpointStorage;
    /// use std::num::NonZeroUsize;
    /// use std::sync::Arc;
    /// use std::time::Duration;
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let storage = LocalCheckpointStorage::new(dir.path(), NonZeroUsize::new(3).unwrap());
    /// let env = StreamEnvironment::new();
    /// env.enable_checkpointing(Duration::from_secs(1));
    /// env.set_checkpoint_storage_backend(Arc::new(storage));
    /// let out = env.from_iter(0u64..10).collect();
    /// env.execute_blocking("backend").unwrap();
    /// assert_eq!(out.len(), 10);
    /// // A bounded job ends with a final checkpoint, written to the backend.
    /// assert!(std::fs::read_dir(dir.path()).unwrap().count() > 0);
    /// ```
    pub fn set_checkpoint_storage_backend(&self, storage: Arc<dyn CheckpointStorage>) -> &Self {
        self.lock().storage_backend = Some(storage);
        self
    }

    /// Starts the next job from the newest valid checkpoint in its own checkpoint storage (the
    /// directory or backend it checkpoints to), or afresh if the storage holds none: what a job
    /// master restarted after a crash does, as Flink's high-availability mode resumes from the
    /// latest completed checkpoint. Needs checkpointing; not combined with
    /// [`restore_from`](Self::restore_from).
    pub fn resume_from_latest_checkpoint(&self) -> &Self {
        self.lock().resume_latest = true;
        self
    }

    /// Starts the next job from a retained checkpoint: either a `chk-N` directory (exactly that
    /// checkpoint) or a checkpoint storage directory (its newest valid checkpoint). The job graph
    /// must be the same as the one checkpointed; operators after the sources may change their
    /// parallelism (keyed state moves with its key groups).
    pub fn restore_from(&self, path: impl Into<PathBuf>) -> &Self {
        self.lock().restore_from = Some(path.into());
        self
    }

    /// What a failure leads to. Default: [`RestartStrategy::none`] without checkpointing,
    /// exponential backoff with it.
    pub fn set_restart_strategy(&self, strategy: RestartStrategy) -> &Self {
        self.lock().restart = Some(strategy);
        self
    }

    /// What a task failure restarts (Flink's `jobmanager.execution.failover-strategy`). Default:
    /// [`FailoverStrategy::Region`], only the failed task's pipelined region (the tasks it
    /// exchanges records with, directly or through others), while the rest of the job keeps
    /// running; [`FailoverStrategy::Full`] restarts every task. Either way the restarted tasks
    /// restore the latest completed checkpoint, and each restart counts against the restart
    /// strategy.
    ///
    /// ```
    /// use sluice_runtime::prelude::*;
    /// use sluice_runtime::failover::FailoverStrategy;
    ///
    /// let env = StreamEnvironment::new();
    /// env.set_failover_strategy(FailoverStrategy::Full);
    /// ```
    pub fn set_failover_strategy(&self, strategy: FailoverStrategy) -> &Self {
        self.lock().failover = strategy;
        self
    }

    /// A bounded source over the items of `iter`, split into contiguous shares across subtasks.
    pub fn from_iter<T: Data + Sync, I: IntoIterator<Item = T>>(&self, iter: I) -> DataStream<T> {
        let data: Arc<Vec<T>> = Arc::new(iter.into_iter().collect());
        self.add_source("Source: Collection", move |ctx, restored| {
            Ok(Box::new(IterReader::new(data.clone(), ctx, restored)?))
        })
    }

    /// A source of records generated from their index; see [`Generator`].
    pub fn from_generator<T, F>(&self, generator: Generator<F>) -> DataStream<T>
    where
        T: Data,
        F: Fn(u64) -> T + Clone + Send + Sync + 'static,
    {
        self.add_source("Source: Generator", move |ctx, restored| {
            Ok(Box::new(GeneratorReader::new(&generator, ctx, restored)?))
        })
    }

    pub(crate) fn add_source<T: Data>(
        &self,
        name: &str,
        make: impl Fn(
            &OperatorContext,
            Option<OperatorState>,
        ) -> Result<Box<dyn SourceReader<T>>, UserError>
        + Send
        + Sync
        + 'static,
    ) -> DataStream<T> {
        let factory = Arc::new(TypedSource {
            make,
            _t: PhantomData,
        });
        let id = self.with_graph(|g| {
            g.add_node(
                name.to_string(),
                NodeKind::Source(factory),
                Arc::new(TypedOutput::<T>(PhantomData)),
                false,
            )
        });
        DataStream::new(self.clone(), id)
    }

    /// Adds a source whose subtasks run a [`SourceHead`] made by `make` (given the subtask's
    /// context and its share of the restored state) and talk to an operator coordinator made by
    /// `coordinator`: the seam the FLIP-27 split sources of `sluice-source` are built on (use
    /// its `from_source` rather than this).
    ///
    /// `validate` runs at submit time: its error refuses the job, naming the source. The head's
    /// state is a list of entries dealt out evenly over the subtasks, so such a source may
    /// restore at another parallelism.
    pub fn add_source_head<T, F, V, P>(
        &self,
        name: &str,
        make: F,
        validate: V,
        coordinator: P,
    ) -> DataStream<T>
    where
        T: Data,
        F: Fn(&OperatorContext, Option<OperatorState>) -> Result<Box<dyn SourceHead<T>>, UserError>
            + Send
            + Sync
            + 'static,
        V: Fn() -> Result<(), UserError> + Send + Sync + 'static,
        P: sluice_coordinator::CoordinatorProvider + 'static,
    {
        let factory = Arc::new(TypedSourceHead {
            make,
            validate,
            _t: PhantomData,
        });
        let provider: Arc<dyn sluice_coordinator::CoordinatorProvider> = Arc::new(coordinator);
        let id = self.with_graph(|g| {
            let id = g.add_node(
                name.to_string(),
                NodeKind::Source(factory),
                Arc::new(TypedOutput::<T>(PhantomData)),
                false,
            );
            g.nodes[id.0].coordinator = Some(provider);
            id
        });
        DataStream::new(self.clone(), id)
    }

    /// Validates and starts the job built so far, returning at once with a [`JobHandle`].
    ///
    /// Must be called inside a tokio runtime (the tasks are spawned on it). Invalid configuration
    /// is reported here, before anything runs; a refused job can be fixed and submitted again.
    pub fn submit(&self, job_name: &str) -> Result<JobHandle, JobError> {
        self.submit_with(job_name, Arc::new(LocalDeployer))
    }

    /// Validates and starts the job built so far as the job master of a cluster: every task
    /// runs on a task manager, through `remote` (see [`cluster`](crate::cluster); the
    /// `sluice-node` crate provides the gRPC side). Checkpoints, coordinators, failover and
    /// the returned [`JobHandle`] work as in local mode.
    pub fn submit_remote(
        &self,
        job_name: &str,
        remote: Arc<RemoteTasks>,
    ) -> Result<JobHandle, JobError> {
        self.submit_with(job_name, Arc::new(RemoteDeployer(remote)))
    }

    /// Validates the job built so far and hands it over for a task manager, which runs the
    /// parts of it a job master deploys there (see [`cluster::Worker`](crate::cluster::Worker)).
    /// Must be called inside a tokio runtime.
    pub fn worker_job(&self, job_name: &str) -> Result<WorkerJob, JobError> {
        let mut inner = self.lock();
        let prepared = self.submission(&inner, job_name).prepare()?;
        let graph = std::mem::take(&mut inner.graph);
        let (plan, config, storage) = prepared.into_worker_parts();
        Ok(WorkerJob::new(graph, plan, config, storage))
    }

    fn submission<'a>(&self, inner: &'a Inner, job_name: &'a str) -> Submission<'a> {
        Submission {
            job_name,
            graph: &inner.graph,
            config: &inner.config,
            checkpoints: inner.checkpoints.as_ref(),
            restart: inner.restart,
            failover: inner.failover,
            storage_dir: inner.storage_dir.as_deref(),
            storage_backend: inner.storage_backend.clone(),
            restore_from: inner.restore_from.as_deref(),
            resume_latest: inner.resume_latest,
        }
    }

    fn submit_with(
        &self,
        job_name: &str,
        deployer: Arc<dyn Deployer>,
    ) -> Result<JobHandle, JobError> {
        let mut inner = self.lock();
        let prepared = self.submission(&inner, job_name).prepare()?;
        // Accepted: the environment starts afresh for the next job.
        inner.restore_from = None;
        inner.resume_latest = false;
        let graph = std::mem::take(&mut inner.graph);
        drop(inner);
        Ok(prepared.launch(graph, deployer))
    }

    /// Runs the job built so far to completion.
    pub async fn execute(&self, job_name: &str) -> Result<JobResult, JobError> {
        self.submit(job_name)?.await
    }

    /// Runs the job built so far to completion on a new multi-threaded tokio runtime, for plain
    /// synchronous `main` functions. Fails if called from inside a tokio runtime.
    pub fn execute_blocking(&self, job_name: &str) -> Result<JobResult, JobError> {
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(JobError::InvalidJob(
                "execute_blocking was called inside a tokio runtime; use execute(..).await".into(),
            ));
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("sluice-worker")
            .build()
            .map_err(|e| JobError::Internal(format!("cannot start the tokio runtime: {e}")))?;
        runtime.block_on(self.execute(job_name))
    }
}
