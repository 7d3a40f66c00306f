// Flink's AsyncDataStream with the cases of sluice's `async-overhead` and `async-latency`
// benchmarks, in a local mini-cluster, for the side-by-side figures in BENCHMARKS.md.
//
// Job: fromSequence(0, n - 1) -> AsyncDataStream.{ordered,unordered}Wait(capacity 100,
// timeout 60 s) -> a counting sink, parallelism 1 (the three chain into one task). The rate is
// timed inside the job, from the first call of the async function to the sink's last record,
// so the mini-cluster's start-up is excluded. The sink digests the records (order-sensitive
// when ordered) exactly as the sluice benchmark does, so the digests can be compared.
//
// Usage: java <add-opens flags> -cp <classes>:<pyflink/lib/*> AsyncBench
//            [--records N] [--latency-records N] [--reps N] [--parallelism P]
// Prints one JSON object per line and case on stdout.

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.LongAdder;
import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.flink.api.connector.sink2.WriterInitContext;
import org.apache.flink.streaming.api.datastream.AsyncDataStream;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.async.AsyncFunction;
import org.apache.flink.streaming.api.functions.async.ResultFuture;

public class AsyncBench {
    static final int CAPACITY = 100;
    static final long TIMEOUT_SECONDS = 60;
    static final long DELAY_MS = 10;
    static final long ORDERED_SEED = 0xcbf29ce484222325L;
    static final long FNV_PRIME = 0x100000001b3L;

    // The mini-cluster runs in this JVM: the job's functions report through these.
    static final AtomicLong FIRST_CALL = new AtomicLong();
    static final AtomicLong LAST_RECORD = new AtomicLong();
    static final AtomicLong DIGEST = new AtomicLong();
    static final LongAdder SINK_RECORDS = new LongAdder();
    static final LongAdder LATENCY_NANOS = new LongAdder();
    static final LongAdder LATENCY_CALLS = new LongAdder();
    static final ScheduledExecutorService TIMER =
            Executors.newSingleThreadScheduledExecutor(
                    r -> {
                        Thread t = new Thread(r, "bench-latency-timer");
                        t.setDaemon(true);
                        return t;
                    });

    static void markFirstCall() {
        if (FIRST_CALL.get() == 0) {
            FIRST_CALL.compareAndSet(0, System.nanoTime());
        }
    }

    /** Completes at once with the input. */
    static class Immediate implements AsyncFunction<Long, Long> {
        @Override
        public void asyncInvoke(Long x, ResultFuture<Long> result) {
            markFirstCall();
            result.complete(Collections.singleton(x));
        }
    }

    /** Completes with the input after 10 ms on a timer thread; measures the latency produced. */
    static class Delayed implements AsyncFunction<Long, Long> {
        @Override
        public void asyncInvoke(Long x, ResultFuture<Long> result) {
            markFirstCall();
            final long start = System.nanoTime();
            TIMER.schedule(
                    () -> {
                        LATENCY_NANOS.add(System.nanoTime() - start);
                        LATENCY_CALLS.increment();
                        result.complete(Collections.singleton(x));
                    },
                    DELAY_MS,
                    TimeUnit.MILLISECONDS);
        }
    }

    /**
     * Digests and counts the records; at end of input (right after its last record: the async
     * operator drains before it ends its output) notes the time, the latest over subtasks.
     */
    static class CountingSink implements Sink<Long> {
        final boolean ordered;

        CountingSink(boolean ordered) {
            this.ordered = ordered;
        }

        @Override
        public SinkWriter<Long> createWriter(WriterInitContext context) {
            return new SinkWriter<Long>() {
                long count;
                long acc = ordered ? ORDERED_SEED : 0;

                @Override
                public void write(Long x, Context context) {
                    acc = ordered ? (acc ^ x) * FNV_PRIME : acc + x;
                    count++;
                }

                @Override
                public void flush(boolean endOfInput) {
                    if (endOfInput) {
                        long now = System.nanoTime();
                        LAST_RECORD.accumulateAndGet(now, Math::max);
                        SINK_RECORDS.add(count);
                        DIGEST.addAndGet(acc);
                    }
                }

                @Override
                public void close() {}
            };
        }
    }

    static final class Result {
        double seconds;
        double meanLatencyMs;
        long digest;
    }

    static Result runOnce(long records, int parallelism, boolean ordered, boolean delayed)
            throws Exception {
        FIRST_CALL.set(0);
        LAST_RECORD.set(0);
        DIGEST.set(0);
        SINK_RECORDS.reset();
        LATENCY_NANOS.reset();
        LATENCY_CALLS.reset();
        StreamExecutionEnvironment env =
                StreamExecutionEnvironment.createLocalEnvironment(parallelism);
        env.getConfig().enableObjectReuse();
        DataStream<Long> source = env.fromSequence(0, records - 1);
        AsyncFunction<Long, Long> function = delayed ? new Delayed() : new Immediate();
        DataStream<Long> out =
                ordered
                        ? AsyncDataStream.orderedWait(
                                source, function, TIMEOUT_SECONDS, TimeUnit.SECONDS, CAPACITY)
                        : AsyncDataStream.unorderedWait(
                                source, function, TIMEOUT_SECONDS, TimeUnit.SECONDS, CAPACITY);
        out.sinkTo(new CountingSink(ordered));
        env.execute("async-bench");
        if (SINK_RECORDS.sum() != records) {
            throw new IllegalStateException(
                    "the sink saw " + SINK_RECORDS.sum() + " records, expected " + records);
        }
        long expected = ordered ? ORDERED_SEED : 0;
        for (long x = 0; x < records; x++) {
            expected = ordered ? (expected ^ x) * FNV_PRIME : expected + x;
        }
        if (DIGEST.get() != expected) {
            throw new IllegalStateException("the sink's digest differs from the records'");
        }
        Result r = new Result();
        r.seconds = (LAST_RECORD.get() - FIRST_CALL.get()) / 1e9;
        long calls = LATENCY_CALLS.sum();
        r.meanLatencyMs = calls == 0 ? 0 : LATENCY_NANOS.sum() / (double) calls / 1e6;
        r.digest = DIGEST.get();
        return r;
    }

    static double median(List<Double> values) {
        List<Double> v = new ArrayList<>(values);
        Collections.sort(v);
        int n = v.size();
        return n % 2 == 1 ? v.get(n / 2) : (v.get(n / 2 - 1) + v.get(n / 2)) / 2;
    }

    static String list(List<Double> values) {
        StringBuilder b = new StringBuilder("[");
        for (int i = 0; i < values.size(); i++) {
            b.append(i == 0 ? "" : ",").append(String.format(Locale.ROOT, "%.1f", values.get(i)));
        }
        return b.append("]").toString();
    }

    /** One warm-up run, then `reps` timed runs; prints the case's JSON line. */
    static void runCase(
            String scenario,
            String caseName,
            long records,
            int parallelism,
            boolean ordered,
            boolean delayed,
            int reps)
            throws Exception {
        System.err.printf(
                "... flink %s %s: %d records, parallelism %d, 1 warm-up + %d timed runs%n",
                scenario, caseName, records, parallelism, reps);
        runOnce(records, parallelism, ordered, delayed);
        List<Double> rates = new ArrayList<>();
        List<Double> latencies = new ArrayList<>();
        long digest = 0;
        for (int i = 0; i < reps; i++) {
            Result r = runOnce(records, parallelism, ordered, delayed);
            rates.add(records / r.seconds);
            latencies.add(r.meanLatencyMs);
            digest = r.digest;
        }
        double rate = median(rates);
        StringBuilder line = new StringBuilder();
        line.append(
                String.format(
                        Locale.ROOT,
                        "{\"system\":\"flink\",\"scenario\":\"%s\",\"case\":\"%s\","
                                + "\"metric\":\"throughput\",\"unit\":\"records/s\","
                                + "\"value\":%.1f,\"values\":%s,\"records\":%d,"
                                + "\"parallelism\":%d,\"digest\":%d",
                        scenario,
                        caseName,
                        rate,
                        list(rates),
                        records,
                        parallelism,
                        digest));
        if (delayed) {
            double w = median(latencies);
            double limit = parallelism * CAPACITY / (w / 1e3);
            line.append(
                    String.format(
                            Locale.ROOT,
                            ",\"mean_latency_ms\":%.3f,\"limit\":%.1f,\"limit_fraction\":%.4f",
                            w,
                            limit,
                            rate / limit));
        }
        System.out.println(line.append("}"));
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        long records = 20_000_000L;
        long latencyRecords = 18_000L;
        int reps = 3;
        int parallelism = 1;
        for (int i = 0; i + 1 < args.length; i += 2) {
            switch (args[i]) {
                case "--records" -> records = Long.parseLong(args[i + 1]);
                case "--latency-records" -> latencyRecords = Long.parseLong(args[i + 1]);
                case "--reps" -> reps = Integer.parseInt(args[i + 1]);
                case "--parallelism" -> parallelism = Integer.parseInt(args[i + 1]);
                default -> throw new IllegalArgumentException("unknown flag " + args[i]);
            }
        }
        runCase("async-overhead", "ordered", records, 1, true, false, reps);
        runCase("async-overhead", "unordered", records, 1, false, false, reps);
        runCase(
                "async-latency",
                "latency-p" + parallelism,
                latencyRecords * parallelism,
                parallelism,
                false,
                true,
                reps);
    }
}
