// One Nexmark query in Flink SQL, one run per JVM process, beside `sluice-bench nexmark-probe`.
// `sluice-bench nexmark` compiles this file (javac --release 17 against pyflink/lib/*) and runs it.
//
// The source: the events file that sluice-bench generated, read by the filesystem connector with
// the json format, declared as the Nexmark project's Kafka table (ddl_kafka.sql: event_type and
// the nested person / auction / bid rows, `dateTime` computed from them, WATERMARK FOR `dateTime`
// AS `dateTime` - INTERVAL '4' SECOND) with the project's person / auction / bid views
// (ddl_views.sql). The queries are the SELECTs of nexmark-flink/src/main/resources/queries/q*.sql
// (github nexmark/nexmark), verbatim but for their blackhole INSERT INTO.
//
// The table is turned into a changelog stream (StreamTableEnvironment.toChangelogStream) and
// written by a Sink V2 writer, one file per subtask, each line the row kind (+I, -U, +U, -D), a
// tab and the row as a JSON array (timestamps as epoch milliseconds, decimals as numbers), so
// that sluice-bench can materialize updating results (q4, q9) and compare them row for row.
//
// Settings as in the Nexmark project's config.yaml where they apply to one JVM: mini-batch on
// (2 s, 50,000 rows), object reuse; heap state, no checkpoints (the bounded run needs none, and
// sluice's side takes none), no restarts, in a local MiniCluster inside this JVM.
//
// Figures:
// - job_ms: JobExecutionResult.getNetRuntime(), the job from its submission to the cluster to
//   its end (scheduling, deployment, operator code generation, the run); excludes the JVM's and
//   the MiniCluster's start-up and the SQL planning;
// - execute_ms: env.execute() as the client sees it (includes the MiniCluster's start-up);
// - peak_rss_kib: VmHWM of /proc/self/status at the end; cpu_s: utime + stime of /proc/self/stat.
//
// Usage: java <add-opens flags> -cp <classes>:<pyflink/lib/*> NexmarkFlink
//            --events DIR --query qN --parallelism P --out DIR
// Prints one JSON line on stdout.

import java.io.BufferedWriter;
import java.io.IOException;
import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.flink.api.common.JobExecutionResult;
import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.flink.api.connector.sink2.WriterInitContext;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.table.api.EnvironmentSettings;
import org.apache.flink.table.api.Table;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;
import org.apache.flink.types.Row;

public class NexmarkFlink {
    static final AtomicLong ROWS = new AtomicLong();

    static final String SOURCE_DDL = """
        CREATE TABLE nexmark (
            event_type int,
            person ROW<
                id  BIGINT,
                name  VARCHAR,
                emailAddress  VARCHAR,
                creditCard  VARCHAR,
                city  VARCHAR,
                state  VARCHAR,
                `dateTime` TIMESTAMP(3),
                extra  VARCHAR>,
            auction ROW<
                id  BIGINT,
                itemName  VARCHAR,
                description  VARCHAR,
                initialBid  BIGINT,
                reserve  BIGINT,
                `dateTime`  TIMESTAMP(3),
                expires  TIMESTAMP(3),
                seller  BIGINT,
                category  BIGINT,
                extra  VARCHAR>,
            bid ROW<
                auction  BIGINT,
                bidder  BIGINT,
                price  BIGINT,
                channel  VARCHAR,
                url  VARCHAR,
                `dateTime`  TIMESTAMP(3),
                extra  VARCHAR>,
            `dateTime` AS
                CASE
                    WHEN event_type = 0 THEN person.`dateTime`
                    WHEN event_type = 1 THEN auction.`dateTime`
                    ELSE bid.`dateTime`
                END,
            WATERMARK FOR `dateTime` AS `dateTime` - INTERVAL '4' SECOND
        ) WITH (
            'connector' = 'filesystem',
            'path' = '%s',
            'format' = 'json'
        )""";

    static final String[] VIEWS = {
        """
        CREATE VIEW person AS
        SELECT
            person.id,
            person.name,
            person.emailAddress,
            person.creditCard,
            person.city,
            person.state,
            `dateTime`,
            person.extra
        FROM nexmark WHERE event_type = 0""",
        """
        CREATE VIEW auction AS
        SELECT
            auction.id,
            auction.itemName,
            auction.description,
            auction.initialBid,
            auction.reserve,
            `dateTime`,
            auction.expires,
            auction.seller,
            auction.category,
            auction.extra
        FROM nexmark WHERE event_type = 1""",
        """
        CREATE VIEW bid AS
        SELECT
            bid.auction,
            bid.bidder,
            bid.price,
            bid.channel,
            bid.url,
            `dateTime`,
            bid.extra
        FROM nexmark WHERE event_type = 2""",
    };

    /** The SELECTs of the Nexmark project's q*.sql. */
    static final Map<String, String> QUERIES = Map.ofEntries(
        Map.entry("q0", "SELECT auction, bidder, price, `dateTime`, extra FROM bid"),
        Map.entry("q1", """
            SELECT
                auction,
                bidder,
                0.908 * price as price, -- convert dollar to euro
                `dateTime`,
                extra
            FROM bid"""),
        Map.entry("q2", "SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0"),
        Map.entry("q3", """
            SELECT
                P.name, P.city, P.state, A.id
            FROM
                auction AS A INNER JOIN person AS P on A.seller = P.id
            WHERE
                A.category = 10 and (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA')"""),
        Map.entry("q4", """
            SELECT
                Q.category,
                AVG(Q.final)
            FROM (
                SELECT MAX(B.price) AS final, A.category
                FROM auction A, bid B
                WHERE A.id = B.auction AND B.`dateTime` BETWEEN A.`dateTime` AND A.expires
                GROUP BY A.id, A.category
            ) Q
            GROUP BY Q.category"""),
        Map.entry("q5", """
            SELECT AuctionBids.auction, AuctionBids.num
             FROM (
               SELECT
                 auction,
                 count(*) AS num,
                 window_start AS starttime,
                 window_end AS endtime
                 FROM TABLE(
                         HOP(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
                 GROUP BY auction, window_start, window_end
             ) AS AuctionBids
             JOIN (
               SELECT
                 max(CountBids.num) AS maxn,
                 CountBids.starttime,
                 CountBids.endtime
               FROM (
                 SELECT
                   count(*) AS num,
                   window_start AS starttime,
                   window_end AS endtime
                 FROM TABLE(
                            HOP(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
                 GROUP BY auction, window_start, window_end
                 ) AS CountBids
               GROUP BY CountBids.starttime, CountBids.endtime
             ) AS MaxBids
             ON AuctionBids.starttime = MaxBids.starttime AND
                AuctionBids.endtime = MaxBids.endtime AND
                AuctionBids.num >= MaxBids.maxn"""),
        Map.entry("q7", """
            SELECT B.auction, B.price, B.bidder, B.`dateTime`, B.extra
            from bid B
            JOIN (
              SELECT MAX(price) AS maxprice, window_end as `dateTime`
              FROM TABLE(
                      TUMBLE(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))
              GROUP BY window_start, window_end
            ) B1
            ON B.price = B1.maxprice
            WHERE B.`dateTime` BETWEEN B1.`dateTime`  - INTERVAL '10' SECOND AND B1.`dateTime`"""),
        Map.entry("q8", """
            SELECT P.id, P.name, P.starttime
            FROM (
              SELECT id, name,
                    window_start AS starttime,
                    window_end AS endtime
              FROM TABLE(
                        TUMBLE(TABLE person, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))
              GROUP BY id, name, window_start, window_end
            ) P
            JOIN (
              SELECT seller,
                    window_start AS starttime,
                    window_end AS endtime
              FROM TABLE(
                    TUMBLE(TABLE auction, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))
              GROUP BY seller, window_start, window_end
            ) A
            ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime"""),
        Map.entry("q9", """
            SELECT
                id, itemName, description, initialBid, reserve, `dateTime`, expires, seller, category, extra,
                auction, bidder, price, bid_dateTime, bid_extra
            FROM (
               SELECT A.*, B.auction, B.bidder, B.price, B.`dateTime` AS bid_dateTime, B.extra AS bid_extra,
                 ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC, B.`dateTime` ASC) AS rownum
               FROM auction A, bid B
               WHERE A.id = B.auction AND B.`dateTime` BETWEEN A.`dateTime` AND A.expires
            )
            WHERE rownum <= 1"""),
        Map.entry("q11", """
            SELECT
                B.bidder,
                count(*) as bid_count,
                SESSION_START(B.`dateTime`, INTERVAL '10' SECOND) as starttime,
                SESSION_END(B.`dateTime`, INTERVAL '10' SECOND) as endtime
            FROM bid B
            GROUP BY B.bidder, SESSION(B.`dateTime`, INTERVAL '10' SECOND)"""),
        Map.entry("q12", """
            SELECT
                bidder,
                count(*) as bid_count,
                window_start AS starttime,
                window_end AS endtime
            FROM TABLE(
                    TUMBLE(TABLE B, DESCRIPTOR(p_time), INTERVAL '10' SECOND))
            GROUP BY bidder, window_start, window_end"""));

    /** q12's view, from q12.sql. */
    static final String Q12_VIEW = "CREATE VIEW B AS SELECT *, PROCTIME() as p_time FROM bid";

    static void appendJson(StringBuilder sb, Object v) {
        if (v == null) {
            sb.append("null");
        } else if (v instanceof String s) {
            sb.append('"');
            for (int i = 0; i < s.length(); i++) {
                char c = s.charAt(i);
                switch (c) {
                    case '"' -> sb.append("\\\"");
                    case '\\' -> sb.append("\\\\");
                    case '\n' -> sb.append("\\n");
                    default -> {
                        if (c < 0x20) {
                            sb.append(String.format("\\u%04x", (int) c));
                        } else {
                            sb.append(c);
                        }
                    }
                }
            }
            sb.append('"');
        } else if (v instanceof LocalDateTime t) {
            sb.append(t.toInstant(ZoneOffset.UTC).toEpochMilli());
        } else if (v instanceof Instant t) {
            sb.append(t.toEpochMilli());
        } else if (v instanceof BigDecimal d) {
            sb.append(d.toPlainString());
        } else {
            sb.append(v);
        }
    }

    /** Writes each change as `kind \t [fields...]` into `<out>/part-<subtask>`. */
    static class RowFileSink implements Sink<Row> {
        final String out;

        RowFileSink(String out) {
            this.out = out;
        }

        @Override
        public SinkWriter<Row> createWriter(WriterInitContext context) throws IOException {
            int subtask = context.getTaskInfo().getIndexOfThisSubtask();
            BufferedWriter w = Files.newBufferedWriter(
                    Path.of(out, "part-" + subtask), StandardCharsets.UTF_8);
            return new SinkWriter<Row>() {
                final StringBuilder sb = new StringBuilder();
                long rows;

                @Override
                public void write(Row row, Context context) throws IOException {
                    sb.setLength(0);
                    sb.append(row.getKind().shortString()).append('\t').append('[');
                    for (int i = 0; i < row.getArity(); i++) {
                        if (i > 0) {
                            sb.append(',');
                        }
                        appendJson(sb, row.getField(i));
                    }
                    sb.append("]\n");
                    w.write(sb.toString());
                    rows++;
                }

                @Override
                public void flush(boolean endOfInput) throws IOException {
                    w.flush();
                }

                @Override
                public void close() throws IOException {
                    w.close();
                    ROWS.addAndGet(rows);
                }
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
        String events = null;
        String query = null;
        String out = null;
        int parallelism = 1;
        for (int i = 0; i + 1 < args.length; i += 2) {
            switch (args[i]) {
                case "--events" -> events = args[i + 1];
                case "--query" -> query = args[i + 1];
                case "--out" -> out = args[i + 1];
                case "--parallelism" -> parallelism = Integer.parseInt(args[i + 1]);
                default -> throw new IllegalArgumentException("unknown flag " + args[i]);
            }
        }
        if (events == null || query == null || out == null || !QUERIES.containsKey(query)) {
            throw new IllegalArgumentException(
                    "usage: --events DIR --query q0..q12 --parallelism P --out DIR");
        }
        Files.createDirectories(Path.of(out));

        Configuration conf = new Configuration();
        conf.set(RestartStrategyOptions.RESTART_STRATEGY, "none");
        conf.setString("table.exec.mini-batch.enabled", "true");
        conf.setString("table.exec.mini-batch.allow-latency", "2s");
        conf.setString("table.exec.mini-batch.size", "50000");
        conf.setString("table.optimizer.distinct-agg.split.enabled", "true");
        StreamExecutionEnvironment env =
                StreamExecutionEnvironment.createLocalEnvironment(parallelism, conf);
        env.getConfig().enableObjectReuse();
        StreamTableEnvironment tEnv =
                StreamTableEnvironment.create(env, EnvironmentSettings.inStreamingMode());
        tEnv.executeSql(String.format(SOURCE_DDL, Path.of(events).toAbsolutePath().toUri()));
        for (String view : VIEWS) {
            tEnv.executeSql(view);
        }
        if (query.equals("q12")) {
            tEnv.executeSql(Q12_VIEW);
        }
        Table result = tEnv.sqlQuery(QUERIES.get(query));
        tEnv.toChangelogStream(result).sinkTo(new RowFileSink(out)).name("rows to files");

        long start = System.nanoTime();
        JobExecutionResult r = env.execute("nexmark " + query);
        long executeNs = System.nanoTime() - start;
        System.out.println(String.format(
                Locale.ROOT,
                "{\"system\":\"flink\",\"query\":\"%s\",\"parallelism\":%d,\"job_ms\":%d,"
                        + "\"execute_ms\":%.1f,\"rows\":%d,\"peak_rss_kib\":%d,\"cpu_s\":%.2f}",
                query,
                parallelism,
                r.getNetRuntime(TimeUnit.MILLISECONDS),
                executeNs / 1e6,
                ROWS.get(),
                statusField("VmHWM"),
                cpuSeconds()));
        System.out.flush();
        // The MiniCluster's non-daemon threads may linger after execute(); the figures are out.
        System.exit(0);
    }
}
