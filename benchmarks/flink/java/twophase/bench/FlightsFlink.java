package twophase.bench;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.Reader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.DateTimeException;
import java.time.Instant;
import java.time.LocalDateTime;
import java.time.ZoneId;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.fs.FileSystem;
import org.apache.flink.core.plugin.PluginUtils;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.table.annotation.DataTypeHint;
import org.apache.flink.table.api.StatementSet;
import org.apache.flink.table.api.TableResult;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;
import org.apache.flink.table.functions.ScalarFunction;

/**
 * The flights job on Flink, all in the JVM (issue #44 item 1): a Flink SQL job in a local
 * MiniCluster that reads the benchmark's pre-filled Kafka topic (unbounded, JSON values), enriches
 * each flight as {@code twophase.integration.jobs.flights.enrich} does and writes it to Kafka
 * (KafkaSink, exactly once) and/or S3 Parquet (the filesystem sink through the S3 plugin).
 *
 * <p>The three lookups (airline by carrier, origin and destination airport by FAA code) are Java
 * scalar functions over the two small dimension tables, which the harness hands over as TSV files
 * and which travel inside the functions (the broadcast of Spark's plan). {@code sched_dep_at} is
 * {@link LocalToInstant}: the same arithmetic as Spark's {@code make_timestamp(y, m, d, h, mi, 0,
 * tz)} (a local date-time in the origin's zone, to an instant; {@code java.time}'s resolution of
 * DST gaps and overlaps, as Spark's).
 *
 * <p>Protocol with {@code benchmarks/bench_flink.py}: one argument, a properties file (the request;
 * S3 keys come from the environment, never the file). The program plans the job, writes the
 * EXPLAIN text to {@code plan.file}, prints {@code FLINKBENCH planned ...} and waits for a line on
 * stdin: {@code go} submits the job (the harness first refuses a plan with Python operators), any
 * other line or end of input exits. After submission it prints {@code FLINKBENCH submitted ...} and
 * runs until the job is cancelled (through the REST API, port {@code rest.port}).
 */
public final class FlightsFlink {

    static final String REPLY = "FLINKBENCH ";

    static final String[][] INPUT = {
        {"flight_id", "STRING"}, {"year", "INT"}, {"month", "INT"}, {"day", "INT"},
        {"dep_time", "INT"}, {"sched_dep_time", "INT"}, {"dep_delay", "DOUBLE"},
        {"arr_time", "INT"}, {"sched_arr_time", "INT"}, {"arr_delay", "DOUBLE"},
        {"carrier", "STRING"}, {"flight", "INT"}, {"tailnum", "STRING"}, {"origin", "STRING"},
        {"dest", "STRING"}, {"air_time", "DOUBLE"}, {"distance", "INT"}, {"hour", "INT"},
        {"minute", "INT"},
    };

    static final String[][] OUTPUT = {
        {"flight_id", "STRING"}, {"year", "INT"}, {"month", "INT"}, {"day", "INT"},
        {"dep_time", "INT"}, {"sched_dep_time", "INT"}, {"dep_delay", "DOUBLE"},
        {"arr_time", "INT"}, {"sched_arr_time", "INT"}, {"arr_delay", "DOUBLE"},
        {"carrier", "STRING"}, {"airline", "STRING"}, {"flight", "INT"}, {"tailnum", "STRING"},
        {"origin", "STRING"}, {"origin_name", "STRING"}, {"origin_tzone", "STRING"},
        {"dest", "STRING"}, {"dest_name", "STRING"}, {"dest_tzone", "STRING"},
        {"air_time", "DOUBLE"}, {"distance", "INT"}, {"delay_class", "STRING"},
        {"sched_dep_at", "TIMESTAMP_LTZ(3)"},
    };

    /** A dimension lookup: code to value, null for a missing code (Spark's left join). */
    public static final class Lookup extends ScalarFunction {
        private final HashMap<String, String> table;

        public Lookup(HashMap<String, String> table) {
            this.table = table;
        }

        public String eval(String code) {
            return code == null ? null : table.get(code);
        }
    }

    /** Spark's {@code make_timestamp(year, month, day, hour, minute, 0, zone)}: null on a null
     * input or an invalid date-time or zone (Spark's non-ANSI result). */
    public static final class LocalToInstant extends ScalarFunction {
        private transient Map<String, ZoneId> zones;

        public @DataTypeHint("TIMESTAMP_LTZ(3)") Instant eval(
                Integer year, Integer month, Integer day, Integer hour, Integer minute, String zone) {
            if (year == null || month == null || day == null || hour == null || minute == null
                    || zone == null) {
                return null;
            }
            if (zones == null) {
                zones = new ConcurrentHashMap<>();
            }
            try {
                ZoneId id = zones.computeIfAbsent(zone, ZoneId::of);
                return LocalDateTime.of(year, month, day, hour, minute).atZone(id).toInstant();
            } catch (DateTimeException e) {
                return null;
            }
        }
    }

    private FlightsFlink() {}

    static String quote(String s) {
        return "'" + s.replace("'", "''") + "'";
    }

    static String columns(String[][] cols) {
        List<String> parts = new ArrayList<>();
        for (String[] c : cols) {
            parts.add("`" + c[0] + "` " + c[1]);
        }
        return String.join(", ", parts);
    }

    static String with(Map<String, String> options) {
        List<String> parts = new ArrayList<>();
        options.forEach((k, v) -> parts.add(quote(k) + " = " + quote(v)));
        return "WITH (" + String.join(", ", parts) + ")";
    }

    /** Column {@code key} to column {@code value} of a TSV file with a header line. */
    static HashMap<String, String> dimension(Path tsv, String key, String value) throws IOException {
        List<String> lines = Files.readAllLines(tsv, StandardCharsets.UTF_8);
        List<String> header = List.of(lines.get(0).split("\t", -1));
        int k = header.indexOf(key);
        int v = header.indexOf(value);
        HashMap<String, String> out = new HashMap<>();
        for (String line : lines.subList(1, lines.size())) {
            String[] f = line.split("\t", -1);
            out.put(f[k], f[v].isEmpty() ? null : f[v]);
        }
        return out;
    }

    /** Request entries under {@code prefix}, the prefix taken off. */
    static Map<String, String> under(Properties req, String prefix) {
        Map<String, String> out = new LinkedHashMap<>();
        for (String name : req.stringPropertyNames()) {
            if (name.startsWith(prefix)) {
                out.put(name.substring(prefix.length()), req.getProperty(name));
            }
        }
        return out;
    }

    static final String ENRICHED =
            "SELECT flight_id, `year`, `month`, `day`, dep_time, sched_dep_time, dep_delay, arr_time,"
                    + " sched_arr_time, arr_delay, carrier, airline_of(carrier) AS airline, flight, tailnum,"
                    + " origin, airport_name_of(origin) AS origin_name, origin_tzone, dest,"
                    + " airport_name_of(dest) AS dest_name, airport_tzone_of(dest) AS dest_tzone,"
                    + " air_time, distance,"
                    + " CASE WHEN dep_time IS NULL OR dep_delay IS NULL THEN 'cancelled'"
                    + " WHEN dep_delay < 15 THEN 'on_time' WHEN dep_delay < 60 THEN 'minor'"
                    + " WHEN dep_delay < 180 THEN 'moderate' ELSE 'severe' END AS delay_class,"
                    + " local_to_instant(`year`, `month`, `day`, `hour`, `minute`, origin_tzone) AS sched_dep_at"
                    + " FROM (SELECT f.*, airport_tzone_of(origin) AS origin_tzone FROM flights_in AS f)";

    public static void main(String[] args) throws Exception {
        Properties req = new Properties();
        try (Reader r = Files.newBufferedReader(Path.of(args[0]), StandardCharsets.UTF_8)) {
            req.load(r);
        }
        Configuration conf = new Configuration();
        under(req, "flink.").forEach(conf::setString);
        Map<String, String> s3 = new LinkedHashMap<>();
        s3.put("s3.endpoint", System.getenv("TWOPHASE_S3_ENDPOINT"));
        s3.put("s3.access-key", System.getenv("TWOPHASE_S3_ACCESS_KEY"));
        s3.put("s3.secret-key", System.getenv("TWOPHASE_S3_SECRET_KEY"));
        s3.put("s3.endpoint.region", System.getenv().getOrDefault("TWOPHASE_S3_REGION", "us-east-1"));
        s3.put("s3.path.style.access", "true");
        s3.forEach((k, v) -> {
            if (v != null) {
                conf.setString(k, v);
            }
        });
        long started = System.nanoTime();
        // a cluster's entry point loads the plugins (the S3 file system); a local environment does not
        FileSystem.initialize(conf, PluginUtils.createPluginManagerFromRootFolder(conf));

        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
        StreamTableEnvironment tEnv = StreamTableEnvironment.create(env);
        Path airlines = Path.of(req.getProperty("airlines"));
        Path airports = Path.of(req.getProperty("airports"));
        tEnv.createTemporarySystemFunction("airline_of", new Lookup(dimension(airlines, "carrier", "name")));
        tEnv.createTemporarySystemFunction("airport_name_of", new Lookup(dimension(airports, "faa", "name")));
        tEnv.createTemporarySystemFunction("airport_tzone_of", new Lookup(dimension(airports, "faa", "tzone")));
        tEnv.createTemporarySystemFunction("local_to_instant", new LocalToInstant());

        Map<String, String> source = new LinkedHashMap<>();
        source.put("connector", "kafka");
        source.put("topic", req.getProperty("input.topic"));
        source.put("properties.bootstrap.servers", req.getProperty("bootstrap"));
        source.put("properties.group.id", req.getProperty("group"));
        source.put("scan.startup.mode", "earliest-offset");
        source.put("format", "json");
        under(req, "source.").forEach(source::put);
        tEnv.executeSql("CREATE TABLE flights_in (" + columns(INPUT) + ") " + with(source));
        tEnv.createTemporaryView("enriched", tEnv.sqlQuery(ENRICHED));

        StatementSet statements = tEnv.createStatementSet();
        List<String> sinks = List.of(req.getProperty("sinks").split(","));
        if (sinks.contains("kafka")) {
            Map<String, String> kafka = new LinkedHashMap<>();
            kafka.put("connector", "kafka");
            kafka.put("topic", req.getProperty("output.topic"));
            kafka.put("properties.bootstrap.servers", req.getProperty("bootstrap"));
            kafka.put("key.format", "raw");
            kafka.put("key.fields", "flight_id");
            kafka.put("value.format", "json");
            kafka.put("value.fields-include", "ALL");
            kafka.put("value.json.timestamp-format.standard", "ISO-8601");
            kafka.put("value.json.encode.ignore-null-fields", "true");
            kafka.put("sink.delivery-guarantee", "exactly-once");
            kafka.put("sink.transactional-id-prefix", req.getProperty("txn.prefix"));
            under(req, "kafka.").forEach(kafka::put);
            tEnv.executeSql("CREATE TABLE kafka_out (" + columns(OUTPUT) + ") " + with(kafka));
            statements.addInsertSql("INSERT INTO kafka_out SELECT * FROM enriched");
        }
        if (sinks.contains("s3")) {
            Map<String, String> files = new LinkedHashMap<>();
            files.put("connector", "filesystem");
            files.put("path", req.getProperty("s3.path"));
            files.put("format", "parquet");
            under(req, "files.").forEach(files::put);
            tEnv.executeSql("CREATE TABLE s3_out (" + columns(OUTPUT) + ") PARTITIONED BY (origin, `month`) "
                    + with(files));
            statements.addInsertSql("INSERT INTO s3_out SELECT * FROM enriched");
        }
        String plan = statements.explain();
        long planned = System.nanoTime();
        Files.writeString(Path.of(req.getProperty("plan.file")), plan, StandardCharsets.UTF_8);
        System.out.println(REPLY + "{\"event\": \"planned\", \"plan_ms\": " + (planned - started) / 1_000_000.0 + "}");
        System.out.flush();

        BufferedReader stdin = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String answer = stdin.readLine();
        if (!"go".equals(answer == null ? null : answer.strip())) {
            System.exit(3);
        }
        long submitting = System.nanoTime();
        TableResult result = statements.execute();
        String jobId = result.getJobClient().orElseThrow().getJobID().toString();
        long submitted = System.nanoTime();
        System.out.println(REPLY + "{\"event\": \"submitted\", \"job_id\": \"" + jobId + "\", \"submit_ms\": "
                + (submitted - submitting) / 1_000_000.0 + "}");
        System.out.flush();
        try {
            result.await();
        } catch (Exception e) {
            // cancelled by the harness: the usual end of an unbounded job
            System.out.println(REPLY + "{\"event\": \"ended\"}");
        }
        System.exit(0);
    }
}
