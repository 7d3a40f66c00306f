// Issue 25's large-state job in Flink, beside `sluice-bench large-state`'s `large` case; one run
// per JVM process. `sluice-bench` compiles this file (javac --release 17 against pyflink/lib/*)
// and runs it (scenarios/large_state.rs, `run_flink`).
//
// Job, as sluice's: record i = 0, 1, 2, ... is key_of(i) (i for i < keys, then a scrambled key:
// i * 0x9E3779B97F4A7C15 rotated left by 17, unsigned, modulo keys) -> keyBy(the record) -> a
// KeyedProcessFunction whose ValueState<byte[]> per key is read, set to value_bytes bytes of
// (record % 251) and written back -> a discarding sink; in a MiniCluster inside this JVM (1
// TaskManager). With --parallelism P (default 1) the TaskManager has P slots, the keyed function
// and the sink run P subtasks and the source one (the gate below counts what one reader emits);
// the managed memory (the budget) is split among the slots, as sluice's stores share theirs.
//
// State: EmbeddedRocksDBStateBackend (state.backend.type: rocksdb, leveled compaction, Flink's
// default, with Snappy) with incremental checkpoints (execution.checkpointing.incremental), its
// memory the slot's managed memory (state.backend.rocksdb.memory.managed, the default), which is
// taskmanager.memory.managed.size = --budget-mib: the same budget as sluice's RocksDB. Checkpoints
// go to --dir (the filesystem checkpoint storage), two retained as in sluice. No restarts.
//
// With --tuned true (the default) two of Flink's own RocksDB options are on, which give RocksDB
// the same table settings as sluice's backend (sluice-rocksdb's backend.rs: a two-level index,
// partitioned filters, the top level pinned, 10-bit bloom filters):
// - state.backend.rocksdb.memory.partitioned-index-filters: true. Without it, each SST file has
//   one index block, charged to the block cache. At 32 MiB the cache is ~28 MB in 32 shards of
//   ~870 KB, partly taken by the write buffer manager's charges; once a compaction writes a file
//   of ~1M entries its index block (626 KB compressed) no longer stays in its shard, and every
//   get reads and decompresses it again: ~1.5 ms per record, 600 records/s (perf: 97 % of the
//   task thread under BlockBasedTable::RetrieveBlock<kIndex>, 94 % in Snappy). With the index
//   partitioned, a get reads a 4 KiB partition through a small pinned top level.
// - state.backend.rocksdb.use-bloom-filter: true (10 bits per key): each record first reads its
//   key, and during the load every key is absent; the filter answers that without a data block.
// --tuned false leaves both at Flink's defaults (what the first figures of BENCHMARKS.md ran).
//
// Phases: the source is NumberSequenceSource's reader behind a gate, which emits records only
// while fewer than ALLOWED have gone (else NOTHING_AVAILABLE, and an availability future that
// the driver completes when it raises ALLOWED): the load (keys records, one per key), a first
// checkpoint, then --intervals intervals of --updates records, each ending in a checkpoint. The
// source is idle during each checkpoint. With --pause false (what sluice-bench passes) the gate
// stays open, as sluice's generator is never paused: records flow on during checkpoints, and an
// interval runs from the last checkpoint's end to the record `updates` after those seen then.
//
// Checkpoints are triggered explicitly with MiniCluster.triggerCheckpoint(job,
// CheckpointType.DEFAULT) (the configured incremental kind); periodic checkpointing is on only so
// that the coordinator exists, at an interval and minimum pause of one hour (the periodic
// scheduler's first trigger is then an hour after the start; manual triggers ignore the pause).
//
// Figures:
// - load_per_s: keys over the first record processed -> the keys-th record processed (in the
//   process function, which records System.nanoTime(); the MiniCluster is in this JVM);
//   startup_ms: job submission -> the first record processed;
// - update_per_s: intervals * updates over the sum, per interval, of the gate's opening -> its
//   last record processed;
// - first_checkpoint_ms, checkpoint_ms: trigger -> the trigger's future completing (the
//   checkpoint completed and acknowledged), as sluice-bench times its own; and Flink's own
//   end_to_end_duration of each (checkpoint_e2e_ms), checkpointed_size (the bytes this
//   checkpoint uploaded: new SST files, changed MANIFEST etc., metadata not included) and
//   state_size (the whole state it refers to) from the job's CheckpointStatsSnapshot; and the
//   keyed subtask's start_delay_ms (trigger -> its barrier arriving, behind the records in
//   flight), alignment_ms, sync_ms (RocksDB's flush and hard links) and async_ms (the upload);
// - peak_rss_kib: VmHWM of /proc/self/status at the end; cpu_s: utime + stime of /proc/self/stat.
//
// Usage: java <add-opens flags> -cp <classes>:<pyflink/lib/*> LargeStateFlink
//            --keys N --updates N --intervals N --value-bytes N --budget-mib N --dir DIR
//            [--pause true|false] [--tuned true|false] [--buffer-timeout-ms N] [--parallelism P]
// Prints one JSON line on stdout.

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.stream.Collectors;
import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.RuntimeExecutionMode;
import org.apache.flink.api.common.eventtime.Watermark;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.PrimitiveArrayTypeInfo;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.connector.source.Boundedness;
import org.apache.flink.api.connector.source.ReaderOutput;
import org.apache.flink.api.connector.source.Source;
import org.apache.flink.api.connector.source.SourceOutput;
import org.apache.flink.api.connector.source.SourceReader;
import org.apache.flink.api.connector.source.SourceReaderContext;
import org.apache.flink.api.connector.source.SplitEnumerator;
import org.apache.flink.api.connector.source.SplitEnumeratorContext;
import org.apache.flink.api.connector.source.lib.NumberSequenceSource;
import org.apache.flink.api.connector.source.lib.NumberSequenceSource.NumberSequenceSplit;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.ExecutionOptions;
import org.apache.flink.configuration.MemorySize;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.configuration.StateBackendOptions;
import org.apache.flink.configuration.TaskManagerOptions;
import org.apache.flink.core.execution.CheckpointType;
import org.apache.flink.core.io.InputStatus;
import org.apache.flink.core.io.SimpleVersionedSerializer;
import org.apache.flink.runtime.checkpoint.AbstractCheckpointStats;
import org.apache.flink.runtime.checkpoint.CompletedCheckpointStats;
import org.apache.flink.runtime.checkpoint.SubtaskStateStats;
import org.apache.flink.runtime.jobgraph.JobGraph;
import org.apache.flink.runtime.jobgraph.JobVertex;
import org.apache.flink.runtime.jobgraph.JobVertexID;
import org.apache.flink.runtime.minicluster.MiniCluster;
import org.apache.flink.runtime.minicluster.MiniClusterConfiguration;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.util.Collector;

public class LargeStateFlink {
    // The MiniCluster runs in this JVM: the driver (main) and the job's functions meet here.
    /** Records the source may emit in all. */
    static final AtomicLong ALLOWED = new AtomicLong();
    /** Completed (and replaced) when ALLOWED is raised. */
    static final AtomicReference<CompletableFuture<Void>> GATE =
            new AtomicReference<>(new CompletableFuture<>());
    /** When the process function has seen MARK records, it completes REACHED with nanoTime. */
    static volatile long MARK = Long.MAX_VALUE;
    static volatile CompletableFuture<Long> REACHED = new CompletableFuture<>();
    static volatile long FIRST_NS;
    /** Records the process function has seen. */
    static final AtomicLong SEEN = new AtomicLong();

    static long keyOf(long i, long keys) {
        if (i < keys) {
            return i;
        }
        return Long.remainderUnsigned(Long.rotateLeft(i * 0x9E3779B97F4A7C15L, 17), keys);
    }

    /** NumberSequenceSource(0, Long.MAX_VALUE / 2) behind the gate. */
    static final class GatedSequence
            implements Source<Long, NumberSequenceSplit, Collection<NumberSequenceSplit>> {
        final NumberSequenceSource inner = new NumberSequenceSource(0, Long.MAX_VALUE / 2);

        @Override
        public Boundedness getBoundedness() {
            return Boundedness.CONTINUOUS_UNBOUNDED;
        }

        @Override
        public SourceReader<Long, NumberSequenceSplit> createReader(SourceReaderContext ctx) {
            return new GatedReader(inner.createReader(ctx));
        }

        @Override
        public SplitEnumerator<NumberSequenceSplit, Collection<NumberSequenceSplit>>
                createEnumerator(SplitEnumeratorContext<NumberSequenceSplit> ctx) {
            return inner.createEnumerator(ctx);
        }

        @Override
        public SplitEnumerator<NumberSequenceSplit, Collection<NumberSequenceSplit>>
                restoreEnumerator(
                        SplitEnumeratorContext<NumberSequenceSplit> ctx,
                        Collection<NumberSequenceSplit> checkpoint) {
            return inner.restoreEnumerator(ctx, checkpoint);
        }

        @Override
        public SimpleVersionedSerializer<NumberSequenceSplit> getSplitSerializer() {
            return inner.getSplitSerializer();
        }

        @Override
        public SimpleVersionedSerializer<Collection<NumberSequenceSplit>>
                getEnumeratorCheckpointSerializer() {
            return inner.getEnumeratorCheckpointSerializer();
        }
    }

    /** Emits through the inner reader while fewer than ALLOWED records have gone. */
    static final class GatedReader implements SourceReader<Long, NumberSequenceSplit> {
        final SourceReader<Long, NumberSequenceSplit> inner;
        long emitted;
        ReaderOutput<Long> wrapped;
        Counting counting;

        GatedReader(SourceReader<Long, NumberSequenceSplit> inner) {
            this.inner = inner;
        }

        /** Counts what the inner reader emits. */
        final class Counting implements ReaderOutput<Long> {
            final ReaderOutput<Long> out;

            Counting(ReaderOutput<Long> out) {
                this.out = out;
            }

            @Override
            public void collect(Long r) {
                emitted++;
                out.collect(r);
            }

            @Override
            public void collect(Long r, long timestamp) {
                emitted++;
                out.collect(r, timestamp);
            }

            @Override
            public void emitWatermark(Watermark w) {
                out.emitWatermark(w);
            }

            @Override
            public void markIdle() {
                out.markIdle();
            }

            @Override
            public void markActive() {
                out.markActive();
            }

            @Override
            public SourceOutput<Long> createOutputForSplit(String split) {
                return out.createOutputForSplit(split);
            }

            @Override
            public void releaseOutputForSplit(String split) {
                out.releaseOutputForSplit(split);
            }
        }

        @Override
        public void start() {
            inner.start();
        }

        @Override
        public InputStatus pollNext(ReaderOutput<Long> out) throws Exception {
            if (emitted >= ALLOWED.get()) {
                return InputStatus.NOTHING_AVAILABLE;
            }
            if (out != wrapped) {
                wrapped = out;
                counting = new Counting(out);
            }
            return inner.pollNext(counting);
        }

        @Override
        public CompletableFuture<Void> isAvailable() {
            // The gate before ALLOWED: the driver raises ALLOWED before it swaps the gate.
            CompletableFuture<Void> gate = GATE.get();
            return emitted < ALLOWED.get() ? inner.isAvailable() : gate;
        }

        @Override
        public List<NumberSequenceSplit> snapshotState(long checkpointId) {
            return inner.snapshotState(checkpointId);
        }

        @Override
        public void addSplits(List<NumberSequenceSplit> splits) {
            inner.addSplits(splits);
        }

        @Override
        public void notifyNoMoreSplits() {
            inner.notifyNoMoreSplits();
        }

        @Override
        public void notifyCheckpointComplete(long checkpointId) throws Exception {
            inner.notifyCheckpointComplete(checkpointId);
        }

        @Override
        public void close() throws Exception {
            inner.close();
        }
    }

    static void open(long allowed) {
        ALLOWED.set(allowed);
        GATE.getAndSet(new CompletableFuture<>()).complete(null);
    }

    /** Keeps a value of `bytes` bytes per key; counts what it processed and signals MARK. */
    static final class Keep extends KeyedProcessFunction<Long, Long, Void> {
        final int bytes;
        /** Several subtasks count into SEEN together (else each counts its own, cheaper). */
        final boolean shared;
        transient ValueState<byte[]> state;
        transient long seen;

        Keep(int bytes, boolean shared) {
            this.bytes = bytes;
            this.shared = shared;
        }

        @Override
        public void open(OpenContext context) {
            state = getRuntimeContext()
                    .getState(new ValueStateDescriptor<>(
                            "value", PrimitiveArrayTypeInfo.BYTE_PRIMITIVE_ARRAY_TYPE_INFO));
        }

        @Override
        public void processElement(Long r, Context ctx, Collector<Void> out) throws Exception {
            // As sluice's `ctx.state()`: the key's value (or a new one), set, written back.
            byte[] v = state.value();
            if (v == null || v.length != bytes) {
                v = new byte[bytes];
            }
            Arrays.fill(v, (byte) (r % 251));
            state.update(v);
            long n;
            if (shared) {
                n = SEEN.incrementAndGet();
            } else {
                n = ++seen;
                SEEN.lazySet(n);
            }
            if (n == 1) {
                FIRST_NS = System.nanoTime();
            }
            if (n == MARK) {
                REACHED.complete(System.nanoTime());
            }
        }
    }

    static long statusField(String name) throws Exception {
        for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
            if (line.startsWith(name + ":")) {
                return Long.parseLong(line.split("\\s+")[1]);
            }
        }
        throw new IllegalStateException("no " + name + " in /proc/self/status");
    }

    static double cpuSeconds() throws Exception {
        String stat = Files.readString(Path.of("/proc/self/stat"));
        String[] f = stat.substring(stat.lastIndexOf(')') + 1).trim().split("\\s+");
        return (Long.parseLong(f[11]) + Long.parseLong(f[12])) / 100.0;
    }

    /** One checkpoint: its wall time and Flink's figures for it. */
    record Checkpoint(
            long id,
            double wallMs,
            long e2eMs,
            long checkpointedBytes,
            long stateBytes,
            long startDelayMs,
            long alignmentMs,
            long syncMs,
            long asyncMs) {}

    static Checkpoint checkpoint(MiniCluster cluster, JobID job, JobVertexID keyed)
            throws Exception {
        long t = System.nanoTime();
        long id = cluster.triggerCheckpoint(job, CheckpointType.DEFAULT).get(1, TimeUnit.HOURS);
        double wallMs = (System.nanoTime() - t) / 1e6;
        for (int attempt = 0; ; attempt++) {
            AbstractCheckpointStats s = cluster.getExecutionGraph(job)
                    .get(1, TimeUnit.MINUTES)
                    .getCheckpointStatsSnapshot()
                    .getHistory()
                    .getCheckpointById(id);
            if (s instanceof CompletedCheckpointStats c) {
                // The keyed subtask's part: the barrier's wait behind in-flight records (start
                // delay), alignment, RocksDB's synchronous part (flush, hard links) and the
                // asynchronous upload.
                SubtaskStateStats k = c.getTaskStateStats(keyed).getSubtaskStats()[0];
                return new Checkpoint(
                        id, wallMs, c.getEndToEndDuration(), c.getCheckpointedSize(),
                        c.getStateSize(), k.getCheckpointStartDelay(), k.getAlignmentDuration(),
                        k.getSyncCheckpointDuration(), k.getAsyncCheckpointDuration());
            }
            if (attempt == 100) {
                throw new IllegalStateException("no statistics of completed checkpoint " + id);
            }
            Thread.sleep(20);
        }
    }

    static String array(List<Checkpoint> cs, java.util.function.Function<Checkpoint, Object> f) {
        return cs.stream()
                .map(c -> String.format(Locale.ROOT, "%s", f.apply(c)))
                .collect(Collectors.joining(",", "[", "]"));
    }

    public static void main(String[] args) throws Exception {
        long keys = 2_796_202;
        long updates = 27_962;
        int intervals = 4;
        int valueBytes = 100;
        long budgetMib = 32;
        boolean pause = true;
        boolean tuned = true;
        long bufferTimeoutMs = 100;
        int parallelism = 1;
        String dir = null;
        for (int i = 0; i + 1 < args.length; i += 2) {
            switch (args[i]) {
                case "--keys" -> keys = Long.parseLong(args[i + 1]);
                case "--updates" -> updates = Long.parseLong(args[i + 1]);
                case "--intervals" -> intervals = Integer.parseInt(args[i + 1]);
                case "--value-bytes" -> valueBytes = Integer.parseInt(args[i + 1]);
                case "--budget-mib" -> budgetMib = Long.parseLong(args[i + 1]);
                case "--dir" -> dir = args[i + 1];
                case "--pause" -> pause = Boolean.parseBoolean(args[i + 1]);
                case "--tuned" -> tuned = Boolean.parseBoolean(args[i + 1]);
                case "--buffer-timeout-ms" -> bufferTimeoutMs = Long.parseLong(args[i + 1]);
                case "--parallelism" -> parallelism = Integer.parseInt(args[i + 1]);
                default -> throw new IllegalArgumentException("unknown flag " + args[i]);
            }
        }
        if (dir == null) {
            throw new IllegalArgumentException(
                    "usage: --keys N --updates N --intervals N --value-bytes N --budget-mib N "
                            + "--dir DIR");
        }
        Path checkpoints = Path.of(dir).toAbsolutePath().resolve("checkpoints");
        Files.createDirectories(checkpoints);

        Configuration conf = new Configuration();
        conf.set(RestartStrategyOptions.RESTART_STRATEGY, "none");
        conf.set(ExecutionOptions.RUNTIME_MODE, RuntimeExecutionMode.STREAMING);
        conf.set(StateBackendOptions.STATE_BACKEND, "rocksdb");
        conf.set(CheckpointingOptions.INCREMENTAL_CHECKPOINTS, true);
        conf.set(CheckpointingOptions.CHECKPOINT_STORAGE, "filesystem");
        conf.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, checkpoints.toUri().toString());
        conf.set(CheckpointingOptions.MAX_RETAINED_CHECKPOINTS, 2);
        conf.set(CheckpointingOptions.CHECKPOINTING_INTERVAL, Duration.ofHours(1));
        conf.set(CheckpointingOptions.MIN_PAUSE_BETWEEN_CHECKPOINTS, Duration.ofHours(1));
        conf.set(TaskManagerOptions.MANAGED_MEMORY_SIZE, MemorySize.ofMebiBytes(budgetMib));
        if (tuned) {
            // As sluice's backend: partitioned index and filter blocks with the top level
            // pinned, and 10-bit bloom filters (see the header).
            conf.setString("state.backend.rocksdb.memory.partitioned-index-filters", "true");
            conf.setString("state.backend.rocksdb.use-bloom-filter", "true");
        }
        conf.set(TaskManagerOptions.NUM_TASK_SLOTS, parallelism);
        conf.set(ExecutionOptions.BUFFER_TIMEOUT, Duration.ofMillis(bufferTimeoutMs));
        // RocksDB's working directory beside the checkpoints (io.tmp.dirs would be /tmp).
        Path work = Path.of(dir).toAbsolutePath().resolve("tmp");
        Files.createDirectories(work);
        conf.setString("io.tmp.dirs", work.toString());

        MiniCluster cluster = new MiniCluster(new MiniClusterConfiguration.Builder()
                .setConfiguration(conf)
                .setNumTaskManagers(1)
                .setNumSlotsPerTaskManager(parallelism)
                .build());
        cluster.start();

        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
        env.setParallelism(parallelism);
        env.getConfig().enableObjectReuse();
        env.setBufferTimeout(bufferTimeoutMs);
        final long k = keys;
        env.fromSource(new GatedSequence(), WatermarkStrategy.noWatermarks(), "generator")
                .setParallelism(1)
                .map(i -> keyOf(i, k))
                .returns(Types.LONG)
                .setParallelism(1)
                .keyBy(r -> r, Types.LONG)
                .process(new Keep(valueBytes, parallelism > 1))
                .returns(Types.VOID)
                .sinkTo(new DiscardingSink<>());
        JobGraph graph = env.getStreamGraph().getJobGraph();
        JobVertexID keyed = null;
        for (JobVertex v : graph.getVertices()) {
            if (v.getName().startsWith("KeyedProcess")) {
                keyed = v.getID();
            }
        }
        if (keyed == null) {
            throw new IllegalStateException("no KeyedProcess vertex in the job graph");
        }

        // Progress on stderr (the log), so that a slow run shows where it is.
        Thread progress = new Thread(() -> {
            long last = 0;
            long lastNs = System.nanoTime();
            while (true) {
                try {
                    Thread.sleep(5_000);
                } catch (InterruptedException e) {
                    return;
                }
                long n = SEEN.get();
                long now = System.nanoTime();
                System.err.printf(
                        Locale.ROOT, "progress: %d records, %.0f/s%n", n,
                        (n - last) / ((now - lastNs) / 1e9));
                last = n;
                lastNs = now;
            }
        }, "progress");
        progress.setDaemon(true);
        progress.start();

        MARK = keys;
        long submitted = System.nanoTime();
        JobID job = cluster.submitJob(graph).get().getJobID();
        open(pause ? keys : Long.MAX_VALUE);
        long loaded = REACHED.get(2, TimeUnit.HOURS);
        long first = FIRST_NS;
        double loadPerS = keys / ((loaded - first) / 1e9);
        double startupMs = (first - submitted) / 1e6;

        Checkpoint firstCheckpoint = checkpoint(cluster, job, keyed);
        List<Checkpoint> after = new ArrayList<>();
        long updatingNs = 0;
        long target = keys;
        for (int n = 0; n < intervals; n++) {
            // Paused: exactly `updates` records after the last. Else, as sluice-bench: the
            // records since the mark were processed during the checkpoint, and the next mark is
            // `updates` after what has been seen now.
            target = pause ? target + updates : SEEN.get() + updates;
            REACHED = new CompletableFuture<>();
            MARK = target;
            long t = System.nanoTime();
            if (pause) {
                open(target);
            }
            updatingNs += REACHED.get(2, TimeUnit.HOURS) - t;
            after.add(checkpoint(cluster, job, keyed));
        }
        double updatePerS = updates * (double) intervals / (updatingNs / 1e9);
        cluster.cancelJob(job).get(1, TimeUnit.MINUTES);

        System.out.println(String.format(
                Locale.ROOT,
                "{\"system\":\"flink\",\"keys\":%d,\"updates\":%d,\"intervals\":%d,"
                        + "\"value_bytes\":%d,\"budget_mib\":%d,\"pause\":%b,\"tuned\":%b,"
                        + "\"buffer_timeout_ms\":%d,\"parallelism\":%d,"
                        + "\"load_per_s\":%.1f,\"update_per_s\":%.1f,\"startup_ms\":%.1f,"
                        + "\"first_checkpoint_ms\":%.1f,\"first_checkpoint_e2e_ms\":%d,"
                        + "\"first_checkpointed_bytes\":%d,\"first_state_bytes\":%d,"
                        + "\"checkpoint_ms\":%s,\"checkpoint_e2e_ms\":%s,"
                        + "\"checkpointed_bytes\":%s,\"state_bytes\":%s,"
                        + "\"start_delay_ms\":%s,\"alignment_ms\":%s,\"sync_ms\":%s,"
                        + "\"async_ms\":%s,"
                        + "\"peak_rss_kib\":%d,\"cpu_s\":%.2f}",
                keys,
                updates,
                intervals,
                valueBytes,
                budgetMib,
                pause,
                tuned,
                bufferTimeoutMs,
                parallelism,
                loadPerS,
                updatePerS,
                startupMs,
                firstCheckpoint.wallMs(),
                firstCheckpoint.e2eMs(),
                firstCheckpoint.checkpointedBytes(),
                firstCheckpoint.stateBytes(),
                array(after, c -> String.format(Locale.ROOT, "%.1f", c.wallMs())),
                array(after, Checkpoint::e2eMs),
                array(after, Checkpoint::checkpointedBytes),
                array(after, Checkpoint::stateBytes),
                array(after, Checkpoint::startDelayMs),
                array(after, Checkpoint::alignmentMs),
                array(after, Checkpoint::syncMs),
                array(after, Checkpoint::asyncMs),
                statusField("VmHWM"),
                cpuSeconds()));
        System.out.flush();
        // The MiniCluster's non-daemon threads may linger; the figures are out.
        System.exit(0);
    }
}
