// Issue 14's end-to-end job in Flink, one run per JVM process, beside `sluice-bench e2e-probe`.
//
// Job: fromSequence(0, n - 1) -> AsyncDataStream.unorderedWait(capacity 100, timeout 60 s) over
// a function that completes at once with sluice-bench's `record(i)` (key, event time) ->
// forBoundedOutOfOrderness(1 s) -> keyBy(key) -> TumblingEventTimeWindows (1 min) ->
// aggregate(count, (key, window start, count)) -> a digesting sink that discards, checkpoints
// every second to a temporary directory on the local disk (Flink's defaults otherwise: heap
// state, no restarts), at the given parallelism, in a local MiniCluster inside this JVM.
//
// Figures, measured exactly as the sluice probe measures them:
// - records_per_s: records over first async call -> last sink subtask's end of input;
// - startup_ms: the launcher's wall clock before it started this JVM (--launched-at-ns) -> the
//   first async call;
// - peak_rss_kib: VmHWM of /proc/self/status at the end of the job;
// - cpu_s: utime + stime of /proc/self/stat (ticks of 10 ms).
//
// Usage: java <add-opens flags> -cp <classes>:<pyflink/lib/*> E2EBench
//            --records N --parallelism P --launched-at-ns NANOS
// Prints one JSON line on stdout.

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.Collections;
import java.util.Locale;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.AggregateFunction;
import org.apache.flink.api.common.state.CheckpointListener;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.flink.api.connector.sink2.WriterInitContext;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.streaming.api.datastream.AsyncDataStream;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.async.AsyncFunction;
import org.apache.flink.streaming.api.functions.async.ResultFuture;
import org.apache.flink.streaming.api.functions.windowing.ProcessWindowFunction;
import org.apache.flink.streaming.api.windowing.assigners.TumblingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.windows.TimeWindow;
import org.apache.flink.util.Collector;

public class E2EBench {
    static final long KEYS = 10_000;
    static final int CAPACITY = 100;

    // The MiniCluster runs in this JVM: the job's functions report through these.
    static final AtomicLong FIRST_CALL_NS = new AtomicLong();
    static final AtomicLong LAST_END_NS = new AtomicLong();
    static final AtomicLong DIGEST = new AtomicLong();
    static final AtomicLong CHECKPOINTS = new AtomicLong();

    static long epochNanos() {
        Instant now = Instant.now();
        return now.getEpochSecond() * 1_000_000_000L + now.getNano();
    }

    /** Completes at once with sluice-bench's `record(i)`: (key, event time). */
    static class Immediate implements AsyncFunction<Long, Tuple2<Long, Long>>, CheckpointListener {
        @Override
        public void asyncInvoke(Long i, ResultFuture<Tuple2<Long, Long>> result) {
            if (FIRST_CALL_NS.get() == 0) {
                FIRST_CALL_NS.compareAndSet(0, epochNanos());
            }
            long h = i * 0x9E3779B97F4A7C15L;
            long key = Long.remainderUnsigned(h >>> 20, KEYS);
            long jitter = Long.remainderUnsigned(h >>> 40, 500);
            result.complete(Collections.singleton(Tuple2.of(key, i * 3 / 5 - jitter)));
        }

        @Override
        public void notifyCheckpointComplete(long checkpointId) {
            CHECKPOINTS.accumulateAndGet(checkpointId, Math::max);
        }
    }

    static class Count implements AggregateFunction<Tuple2<Long, Long>, Long, Long> {
        @Override
        public Long createAccumulator() {
            return 0L;
        }

        @Override
        public Long add(Tuple2<Long, Long> value, Long acc) {
            return acc + 1;
        }

        @Override
        public Long getResult(Long acc) {
            return acc;
        }

        @Override
        public Long merge(Long a, Long b) {
            return a + b;
        }
    }

    static class WithWindow
            extends ProcessWindowFunction<Long, Tuple3<Long, Long, Long>, Long, TimeWindow> {
        @Override
        public void process(
                Long key,
                Context context,
                Iterable<Long> counts,
                Collector<Tuple3<Long, Long, Long>> out) {
            for (Long n : counts) {
                out.collect(Tuple3.of(key, context.window().getStart(), n));
            }
        }
    }

    /** sluice-bench's `digest_entry`, summed with wrapping; the records are then dropped. */
    static class DigestSink implements Sink<Tuple3<Long, Long, Long>> {
        @Override
        public SinkWriter<Tuple3<Long, Long, Long>> createWriter(WriterInitContext context) {
            return new SinkWriter<Tuple3<Long, Long, Long>>() {
                long acc;

                @Override
                public void write(Tuple3<Long, Long, Long> r, Context context) {
                    acc += ((r.f0 * 0x2545F4914F6CDD1DL) ^ (r.f1 * 0x9E3779B9L)) + r.f2;
                }

                @Override
                public void flush(boolean endOfInput) {
                    if (endOfInput) {
                        LAST_END_NS.accumulateAndGet(epochNanos(), Math::max);
                        DIGEST.addAndGet(acc);
                        acc = 0;
                    }
                }

                @Override
                public void close() {}
            };
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

    public static void main(String[] args) throws Exception {
        long records = 10_000_000L;
        int parallelism = 1;
        long launched = epochNanos();
        for (int i = 0; i + 1 < args.length; i += 2) {
            switch (args[i]) {
                case "--records" -> records = Long.parseLong(args[i + 1]);
                case "--parallelism" -> parallelism = Integer.parseInt(args[i + 1]);
                case "--launched-at-ns" -> launched = Long.parseLong(args[i + 1]);
                default -> throw new IllegalArgumentException("unknown flag " + args[i]);
            }
        }
        // A failure must surface, not loop in restarts (sluice's probe has none either).
        Configuration conf = new Configuration();
        conf.set(RestartStrategyOptions.RESTART_STRATEGY, "none");
        // Checkpoints on the local disk, as sluice's probe writes them (Flink's default keeps
        // them in the JobManager's heap, limited to 5 MB per state: too small for this job at
        // parallelism 2).
        Path checkpoints = Files.createTempDirectory("e2e-flink-checkpoints");
        conf.set(CheckpointingOptions.CHECKPOINT_STORAGE, "filesystem");
        conf.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, checkpoints.toUri().toString());
        StreamExecutionEnvironment env =
                StreamExecutionEnvironment.createLocalEnvironment(parallelism, conf);
        env.getConfig().enableObjectReuse();
        env.enableCheckpointing(1000);
        DataStream<Tuple2<Long, Long>> clicks =
                AsyncDataStream.unorderedWait(
                                env.fromSequence(0, records - 1),
                                new Immediate(),
                                60,
                                java.util.concurrent.TimeUnit.SECONDS,
                                CAPACITY)
                        .assignTimestampsAndWatermarks(
                                WatermarkStrategy.<Tuple2<Long, Long>>forBoundedOutOfOrderness(
                                                Duration.ofSeconds(1))
                                        .withTimestampAssigner((r, ts) -> r.f1));
        clicks.keyBy(r -> r.f0)
                .window(TumblingEventTimeWindows.of(Duration.ofMinutes(1)))
                .aggregate(new Count(), new WithWindow())
                .sinkTo(new DigestSink());
        env.execute("e2e-bench");
        long first = FIRST_CALL_NS.get();
        long last = LAST_END_NS.get();
        System.out.println(
                String.format(
                        Locale.ROOT,
                        "{\"system\":\"flink\",\"records\":%d,\"parallelism\":%d,"
                                + "\"records_per_s\":%.1f,\"startup_ms\":%.1f,"
                                + "\"peak_rss_kib\":%d,\"cpu_s\":%.2f,\"checkpoints\":%d,"
                                + "\"digest\":%d}",
                        records,
                        parallelism,
                        records / ((last - first) / 1e9),
                        (first - launched) / 1e6,
                        statusField("VmHWM"),
                        cpuSeconds(),
                        CHECKPOINTS.get(),
                        DIGEST.get()));
        System.out.flush();
        try (var paths = Files.walk(checkpoints)) {
            paths.sorted(java.util.Comparator.reverseOrder()).forEach(f -> f.toFile().delete());
        }
        // The MiniCluster's non-daemon threads may linger after execute(); the figures are out.
        System.exit(0);
    }
}
