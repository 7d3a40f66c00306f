// Flink's event-time windows with the cases of sluice's `window` benchmark, in a local
// mini-cluster, for the side-by-side figures in BENCHMARKS.md.
//
// Job: fromSequence(0, n - 1) -> map to (key, event time) exactly as sluice's `record(i)` ->
// forBoundedOutOfOrderness(1 s) -> keyBy(key) -> TumblingEventTimeWindows (1 min) or
// SlidingEventTimeWindows (1 min / 10 s) -> aggregate(count, (key, window start, count)) -> a
// digesting sink, parallelism 1. The rate is timed inside the job, from the first record of the
// map to the sink's end of input, so the mini-cluster's start-up is excluded. The sink's digest
// is the sluice benchmark's, so both engines can be checked to count the same windows.
//
// Usage: java <add-opens flags> -cp <classes>:<pyflink/lib/*> WindowBench [--records N] [--reps N]
// Prints one JSON object per line and case on stdout.

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.AggregateFunction;
import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.flink.api.connector.sink2.WriterInitContext;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.windowing.ProcessWindowFunction;
import org.apache.flink.streaming.api.windowing.assigners.SlidingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.assigners.TumblingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.assigners.WindowAssigner;
import org.apache.flink.streaming.api.windowing.windows.TimeWindow;
import org.apache.flink.util.Collector;

public class WindowBench {
    static final long KEYS = 10_000;

    static final AtomicLong FIRST_RECORD = new AtomicLong();
    static final AtomicLong LAST_RECORD = new AtomicLong();
    static final AtomicLong DIGEST = new AtomicLong();

    /** sluice-bench's `record(i)`: (key, event time). */
    static class Record implements MapFunction<Long, Tuple2<Long, Long>> {
        @Override
        public Tuple2<Long, Long> map(Long i) {
            if (FIRST_RECORD.get() == 0) {
                FIRST_RECORD.compareAndSet(0, System.nanoTime());
            }
            long h = i * 0x9E3779B97F4A7C15L;
            long key = Long.remainderUnsigned(h >>> 20, KEYS);
            long jitter = Long.remainderUnsigned(h >>> 40, 500);
            return Tuple2.of(key, i * 3 / 5 - jitter);
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

    /** sluice-bench's `digest_entry`, summed with wrapping. */
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
                        LAST_RECORD.accumulateAndGet(System.nanoTime(), Math::max);
                        DIGEST.addAndGet(acc);
                    }
                }

                @Override
                public void close() {}
            };
        }
    }

    static double runOnce(long records, boolean sliding) throws Exception {
        FIRST_RECORD.set(0);
        LAST_RECORD.set(0);
        DIGEST.set(0);
        StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(1);
        env.getConfig().enableObjectReuse();
        WindowAssigner<Object, TimeWindow> assigner =
                sliding
                        ? SlidingEventTimeWindows.of(Duration.ofMinutes(1), Duration.ofSeconds(10))
                        : TumblingEventTimeWindows.of(Duration.ofMinutes(1));
        DataStream<Tuple2<Long, Long>> clicks =
                env.fromSequence(0, records - 1)
                        .map(new Record())
                        .assignTimestampsAndWatermarks(
                                WatermarkStrategy.<Tuple2<Long, Long>>forBoundedOutOfOrderness(
                                                Duration.ofSeconds(1))
                                        .withTimestampAssigner((r, ts) -> r.f1));
        clicks.keyBy(r -> r.f0)
                .window(assigner)
                .aggregate(new Count(), new WithWindow())
                .sinkTo(new DigestSink());
        env.execute("window-bench");
        return records / ((LAST_RECORD.get() - FIRST_RECORD.get()) / 1e9);
    }

    static double median(List<Double> values) {
        List<Double> v = new ArrayList<>(values);
        Collections.sort(v);
        int n = v.size();
        return n % 2 == 1 ? v.get(n / 2) : (v.get(n / 2 - 1) + v.get(n / 2)) / 2;
    }

    static void runCase(String caseName, long records, boolean sliding, int reps)
            throws Exception {
        System.err.printf(
                "... flink window %s: %d records, 1 warm-up + %d timed runs%n",
                caseName, records, reps);
        runOnce(records, sliding);
        List<Double> rates = new ArrayList<>();
        for (int i = 0; i < reps; i++) {
            rates.add(runOnce(records, sliding));
        }
        System.out.println(
                String.format(
                        Locale.ROOT,
                        "{\"system\":\"flink\",\"scenario\":\"window\",\"case\":\"%s\","
                                + "\"metric\":\"throughput\",\"unit\":\"records/s\","
                                + "\"value\":%.1f,\"records\":%d,\"parallelism\":1,"
                                + "\"digest\":%d}",
                        caseName,
                        median(rates),
                        records,
                        DIGEST.get()));
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        long records = 10_000_000L;
        int reps = 3;
        for (int i = 0; i + 1 < args.length; i += 2) {
            switch (args[i]) {
                case "--records" -> records = Long.parseLong(args[i + 1]);
                case "--reps" -> reps = Integer.parseInt(args[i + 1]);
                default -> throw new IllegalArgumentException("unknown flag " + args[i]);
            }
        }
        runCase("tumbling", records, false, reps);
        runCase("sliding", records, true, reps);
    }
}
