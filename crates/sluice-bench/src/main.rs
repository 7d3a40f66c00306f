//! Benchmarks of sluice against hand-written baselines, run side by side in the same process.
//!
//! One subcommand per scenario: `cargo run --release -p sluice-bench -- <scenario> [--quick]
//! [--json]`. Each scenario lives in its own module under [`scenarios`] and reports through
//! [`report`]; timing, medians and peak memory come from [`measure`]. BENCHMARKS.md quotes the
//! figures.

mod measure;
mod report;
mod scenarios;

use clap::{Parser, Subcommand};

/// sluice benchmarks: each scenario runs sluice and its baseline in the same run and prints the
/// ratio sluice/baseline (higher is better).
#[derive(Parser)]
#[command(name = "sluice-bench", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// generator -> map -> filter -> key_by -> sum-per-key sink, against plain loops and a
    /// crossbeam-channel exchange.
    Pipeline(scenarios::pipeline::Args),
    /// Checkpoints: throughput of the keyed pipeline job with a checkpoint every 100 ms against
    /// none, and checkpoint duration p50/p99 for small and 100 MB operator state.
    Checkpoint(scenarios::checkpoint::Args),
    /// Async I/O overhead: an async wait over a function that completes at once, against
    /// futures `buffered` / `buffer_unordered`.
    AsyncOverhead(scenarios::async_io::OverheadArgs),
    /// Async I/O under 10 ms latency: throughput as a fraction of Little's-law limit, beside
    /// futures `buffer_unordered`.
    AsyncLatency(scenarios::async_io::LatencyArgs),
    /// Lookups against the real Redis and PostgreSQL of this machine: per-record async vs
    /// batched (batch 100) vs batched with a cache, beside a hand-written loop of pipelined
    /// `MGET` / `= ANY` calls.
    Lookup(scenarios::lookup::Args),
    /// Operator coordinators: event round trip subtask -> coordinator -> subtask and broadcast
    /// to 4 subtasks, against bare tokio channels.
    Coordinator(scenarios::coordinator::Args),
    /// Range shuffle balance: (max - mean) / mean records per downstream subtask over seeded
    /// runs at 8 and 32 subtasks, Map on a long tail and Sketch on random 128-bit ids, beside
    /// hash partitioning and Iceberg's figures.
    ShuffleSkew(scenarios::shuffle::skew::Args),
    /// Range shuffle cost: the range partitioner's records/s beside a hash partitioner, and the
    /// coordinator's aggregation and assignment time for 32 subtasks x 100,000-key maps.
    ShuffleCost(scenarios::shuffle::cost::Args),
    /// Event-time windows: a 1-minute tumbling and a 1-minute/10-second sliding count per key
    /// (10,000 keys), against a loop over an FxHashMap of (key, window) counts with the same
    /// firing rule.
    Window(scenarios::window::Args),
    /// Failover: time from an injected failure to the first record processed after the
    /// restore, p50/p99 over 20 failures, under region and under full failover.
    Failover(scenarios::failover::Args),
    /// FileSource on JSON lines (records/s, MB/s) at parallelism 1 and 2, beside a plain
    /// buffered read-and-parse loop with the same serde decoder.
    Source(scenarios::source::Args),
    /// The exactly-once Iceberg sink: records/s beside a plain arrow + parquet loop writing
    /// files of the same size, and on skewed keys at 8 writers the data files and mean file size
    /// per distribution mode (none, hash, range).
    IcebergSink(scenarios::iceberg::Args),
    /// Kafka against a real broker (`SLUICE_KAFKA_BOOTSTRAP`): the bounded KafkaSource at
    /// parallelism 1 beside a plain rdkafka consumer loop, and the KafkaSink exactly-once and
    /// at-least-once beside a plain rdkafka producer loop.
    Kafka(scenarios::kafka::Args),
    /// End to end, one fresh process per run: sequence -> async wait (completes at once) ->
    /// key_by -> 1-minute tumbling window count per key -> discard, checkpoints every second, at
    /// parallelism 1 and 2; records/s, start-up time and peak memory (beside Flink:
    /// `flink/run_async_flink.sh --only e2e`).
    E2e(scenarios::e2e::Args),
    /// Nexmark beside Apache Flink 2.3 SQL over the same generated event files, one fresh
    /// process per run, sluice and Flink alternating, at parallelism 1 and 2: events/s, peak
    /// RSS, CPU time, and whether both engines' results agree row for row.
    Nexmark(scenarios::nexmark::Args),
    /// Internal: one Nexmark query in a fresh process, printing its figures as one JSON line.
    #[command(hide = true)]
    NexmarkProbe(scenarios::nexmark::ProbeArgs),
    /// Internal: one e2e job in a fresh process, printing its figures as one JSON line.
    #[command(hide = true)]
    E2eProbe(scenarios::e2e::ProbeArgs),
    /// Cluster mode (every role its own process on loopback): a keyed exchange at parallelism 2
    /// over a job master and 2 task managers beside one process, and an async job with 10 ms
    /// lookups on 1 vs 2 task managers.
    Cluster(scenarios::cluster::Args),
    /// Internal: one process of a `cluster` run (local, job master or task manager, from its
    /// `SLUICE_*` environment).
    #[command(hide = true)]
    ClusterNode(scenarios::cluster::NodeArgs),
    /// State larger than memory: keyed state on the heap and in RocksDB (incremental
    /// checkpoints), a fresh process per case: throughput against the heap on state that fits,
    /// peak RSS against the budget on state 10x larger, the second checkpoint's bytes after 1 %
    /// of the keys changed and its duration at twice the state, and the restore time.
    LargeState(scenarios::large_state::Args),
    /// A `MapState` in RocksDB, an entry per stored value, against a whole map per stored value
    /// (how it was kept before): large maps behind a small budget, and small maps.
    MapState(scenarios::map_state::Args),
    /// Internal: one `map-state` run in a fresh process, printing its figures as one JSON line.
    #[command(hide = true)]
    MapStateProbe(scenarios::map_state::ProbeArgs),
    /// Internal: one `large-state` case in a fresh process, printing its figures as one JSON
    /// line.
    #[command(hide = true)]
    LargeStateProbe(scenarios::large_state::ProbeArgs),
    /// Internal: one pipeline job in a fresh process, printing its peak memory (used by
    /// `pipeline` to show that memory does not grow with the record count).
    #[command(hide = true)]
    PipelineMemoryProbe(scenarios::pipeline::ProbeArgs),
}

/// Both sides of every benchmark run in this process, so they share its allocator: mimalloc,
/// as a production sluice binary would use (see `BENCHMARKS.md`, "Allocator"). Built with
/// mimalloc's `override`, it serves the C library's `malloc` too, and with it RocksDB's own
/// allocations (`docs/state-backends.md`, "The memory budget").
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Which allocator serves Rust's allocations and the C library's `malloc` in this binary.
pub(crate) const ALLOCATOR_NAME: &str = if cfg!(feature = "mimalloc") {
    "mimalloc 2 (also malloc)"
} else {
    "the C library's malloc"
};

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Pipeline(args) => scenarios::pipeline::run(&args),
        Command::Checkpoint(args) => scenarios::checkpoint::run(&args),
        Command::AsyncOverhead(args) => scenarios::async_io::run_overhead(&args),
        Command::AsyncLatency(args) => scenarios::async_io::run_latency(&args),
        Command::Coordinator(args) => scenarios::coordinator::run(&args),
        Command::Lookup(args) => scenarios::lookup::run(&args),
        Command::ShuffleSkew(args) => scenarios::shuffle::skew::run(&args),
        Command::ShuffleCost(args) => scenarios::shuffle::cost::run(&args),
        Command::Window(args) => scenarios::window::run(&args),
        Command::Source(args) => scenarios::source::run(&args),
        Command::Failover(args) => scenarios::failover::run(&args),
        Command::IcebergSink(args) => scenarios::iceberg::run(&args),
        Command::Kafka(args) => scenarios::kafka::run(&args),
        Command::E2e(args) => scenarios::e2e::run(&args),
        Command::E2eProbe(args) => scenarios::e2e::probe(&args),
        Command::Nexmark(args) => scenarios::nexmark::run(&args),
        Command::NexmarkProbe(args) => scenarios::nexmark::probe(&args),
        Command::Cluster(args) => scenarios::cluster::run(&args),
        Command::ClusterNode(args) => scenarios::cluster::node(&args),
        Command::PipelineMemoryProbe(args) => scenarios::pipeline::probe(&args),
        Command::LargeState(args) => scenarios::large_state::run(&args),
        Command::LargeStateProbe(args) => scenarios::large_state::probe(&args),
        Command::MapState(args) => scenarios::map_state::run(&args),
        Command::MapStateProbe(args) => scenarios::map_state::probe(&args),
    }
}
