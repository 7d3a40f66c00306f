//! A small keyed job to try cluster mode with (and what the multi-process tests run): counts
//! generated records per key with checkpointed state and, at the end of input, writes each
//! key's total to `<out>/part-<subtask>`.
//!
//! Local: `SLUICE_DEMO_OUT=/tmp/out cargo run -p sluice-node --bin sluice-cluster-demo`.
//! Cluster: the same binary with `SLUICE_MODE=jobmanager` in one process and
//! `SLUICE_MODE=taskmanager SLUICE_JOBMANAGER=127.0.0.1:6123` in others, all with the same
//! `SLUICE_SECRET` (see the README).
//!
//! Settings: `SLUICE_DEMO_OUT` (output directory, required), `SLUICE_DEMO_RECORDS` (default
//! 1,000,000), `SLUICE_DEMO_KEYS` (default 1,000), `SLUICE_DEMO_PARALLELISM` (default 2),
//! `SLUICE_DEMO_RATE` (records per second, unlimited by default), `SLUICE_DEMO_CHECKPOINTS`
//! (checkpoint directory or object-store URL such as `s3://bucket/path` with the `AWS_*` variables; default `sluice-checkpoints/demo`), `SLUICE_DEMO_RESUME=true` (resume
//! from the newest checkpoint there, as a restarted job master does), `SLUICE_DEMO_RESTORE_FROM`
//! (a checkpoint directory, or a storage directory's newest checkpoint, to start from; in
//! cluster mode every process must reach it at that path), `SLUICE_DEMO_STATE_BACKEND`
//! (`heap`, the default, or `rocksdb` with the `rocksdb` feature: the totals in RocksDB under
//! `SLUICE_DEMO_STATE_DIR`, incremental checkpoints).

use anyhow::Context;
use sluice_core::CheckpointId;
use sluice_runtime::failover::RestartStrategy;
use sluice_runtime::prelude::*;
use sluice_runtime::state::ValueState;
use std::path::PathBuf;
use std::time::Duration;

fn var<T: std::str::FromStr>(name: &str, default: T) -> anyhow::Result<T>
where
    T::Err: std::fmt::Display,
{
    match std::env::var(name) {
        Ok(v) => v.parse().map_err(|e| anyhow::anyhow!("{name}={v:?}: {e}")),
        Err(_) => Ok(default),
    }
}

/// Per key: the running total, keyed state (on the heap, or in the job's state backend's
/// store); written out at the end of input.
#[derive(Clone)]
struct Totals {
    out: PathBuf,
    subtask: usize,
    max_parallelism: usize,
    totals: ValueState<u64, u64>,
}

impl Operator<(u64, u64)> for Totals {
    type Out = (u64, u64);
    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.subtask = ctx.subtask_index();
        self.max_parallelism = ctx.max_parallelism();
        ctx.attach_keyed_state(&mut self.totals)?;
        Ok(())
    }
    fn process_batch(
        &mut self,
        batch: Vec<(u64, u64)>,
        _: &mut Collector<(u64, u64)>,
    ) -> Result<(), UserError> {
        for (k, n) in batch {
            *self.totals.get_or_default(k) += n;
        }
        match self.totals.take_error() {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }
    fn snapshot_state(
        &mut self,
        _: CheckpointId,
        _: &mut Collector<(u64, u64)>,
    ) -> Result<OperatorState, UserError> {
        let mut state = OperatorState::default();
        self.totals
            .snapshot_into(self.max_parallelism, &mut state)?;
        Ok(state)
    }
    fn initialize_state(&mut self, state: OperatorState) -> Result<(), UserError> {
        self.totals.restore_from(&state)?;
        Ok(())
    }
    fn end_input(&mut self, _: &mut Collector<(u64, u64)>) -> Result<(), UserError> {
        let mut totals = self.totals.entries()?;
        totals.sort_unstable();
        let text: String = totals.iter().map(|(k, n)| format!("{k} {n}\n")).collect();
        let path = self.out.join(format!("part-{}", self.subtask));
        std::fs::write(&path, text).map_err(|e| format!("writing {}: {e}", path.display()))?;
        Ok(())
    }
}

/// `SLUICE_DEMO_STATE_BACKEND`: `heap` (the default) or `rocksdb` (keyed state in RocksDB under
/// `SLUICE_DEMO_STATE_DIR`, incremental checkpoints), which needs the `rocksdb` feature.
fn set_state_backend(env: &StreamEnvironment) -> anyhow::Result<()> {
    let backend: String = var("SLUICE_DEMO_STATE_BACKEND", "heap".to_string())?;
    match backend.as_str() {
        "heap" => Ok(()),
        #[cfg(feature = "rocksdb")]
        "rocksdb" => {
            let dir: PathBuf = var(
                "SLUICE_DEMO_STATE_DIR",
                std::env::temp_dir().join("sluice-demo-state"),
            )?;
            env.set_state_backend(
                sluice_rocksdb::RocksDbStateBackend::new(dir)
                    .memory_budget(64 << 20)
                    .incremental(true),
            );
            Ok(())
        }
        #[cfg(not(feature = "rocksdb"))]
        "rocksdb" => {
            let _ = env;
            anyhow::bail!(
                "SLUICE_DEMO_STATE_BACKEND=rocksdb: this build of sluice-cluster-demo has no \
                 RocksDB backend (build sluice-node with --features rocksdb)"
            )
        }
        other => anyhow::bail!("SLUICE_DEMO_STATE_BACKEND={other:?}: expected heap or rocksdb"),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let out: PathBuf = std::env::var("SLUICE_DEMO_OUT")
        .context("SLUICE_DEMO_OUT must name the output directory")?
        .into();
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let records: u64 = var("SLUICE_DEMO_RECORDS", 1_000_000)?;
    let keys: u64 = var("SLUICE_DEMO_KEYS", 1_000)?;
    let parallelism: usize = var("SLUICE_DEMO_PARALLELISM", 2)?;
    let rate: f64 = var("SLUICE_DEMO_RATE", 0.0)?;
    let checkpoints: PathBuf = var(
        "SLUICE_DEMO_CHECKPOINTS",
        PathBuf::from("sluice-checkpoints/demo"),
    )?;
    anyhow::ensure!(keys > 0, "SLUICE_DEMO_KEYS must be at least 1");

    let env = StreamEnvironment::new();
    env.set_parallelism(parallelism);
    env.enable_checkpointing(Duration::from_millis(100));
    let location = checkpoints.to_string_lossy().into_owned();
    if location.contains("://") {
        // An object store (s3://bucket/path with the AWS_* variables, file://, memory://).
        let storage = sluice_object_store::ObjectStoreCheckpointStorage::from_url(
            &location,
            sluice_object_store::ObjectStoreCheckpointStorage::aws_options_from_env(),
            std::num::NonZeroUsize::MIN.saturating_add(2),
        )
        .with_context(|| format!("SLUICE_DEMO_CHECKPOINTS={location}"))?;
        env.set_checkpoint_storage_backend(std::sync::Arc::new(storage));
    } else {
        env.set_checkpoint_storage(&checkpoints);
    }
    set_state_backend(&env)?;
    if var("SLUICE_DEMO_RESUME", false)? {
        // A job master started again finds where its predecessor got to.
        env.resume_from_latest_checkpoint();
    }
    if let Ok(path) = std::env::var("SLUICE_DEMO_RESTORE_FROM") {
        // A new job from another job's checkpoints (Flink's `run -s <path>`).
        env.restore_from(PathBuf::from(path));
    }
    env.set_restart_strategy(RestartStrategy::fixed_delay(5, Duration::from_millis(200))?);
    let generator = Generator::new(|i| i).take(records);
    let generator = if rate > 0.0 {
        generator.rate_limit(rate)
    } else {
        generator
    };
    env.from_generator(generator)
        .map(move |i| (i % keys, 1u64))
        .name("Key")
        .key_by(|r: &(u64, u64)| r.0)
        .process(Totals {
            out,
            subtask: 0,
            max_parallelism: 0,
            totals: ValueState::new("totals"),
        })
        .name("Totals")
        .discard();
    match sluice_node::execute(&env, "cluster-demo").await? {
        Some(result) => println!(
            "job finished: {} restarts, {} checkpoints",
            result.restarts, result.completed_checkpoints
        ),
        None => println!("task manager done: the job ended"),
    }
    Ok(())
}
