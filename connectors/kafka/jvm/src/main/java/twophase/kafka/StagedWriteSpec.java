package twophase.kafka;

import java.io.Serializable;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.regex.Pattern;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * One staged write's settings, read from the write's options on the driver (a bad option fails
 * the write before any task runs) and shipped to every task.
 *
 * <p>Options: {@code twophase.write.id} (the hand-off's key), {@code twophase.transactional.id.prefix},
 * {@code twophase.sink}, {@code twophase.slot} (the pool slot of the checkpoint), {@code
 * twophase.checkpoint}, {@code twophase.topic} (a row's topic when its {@code topic} is null),
 * {@code twophase.lineage.job} (set: every record gets the {@code twophase.job} and {@code
 * twophase.checkpoint} headers), and every producer setting
 * as {@code twophase.secret.producer.<Java client key>}: the word "secret" in the key makes Spark
 * redact the value wherever it shows a write's options ({@code spark.redaction.regex}).
 *
 * <p>Columns, by name: {@code value} (binary), and optionally {@code key} (binary), {@code headers}
 * (array of struct&lt;key: string, value: binary&gt;), {@code partition} (int), {@code topic} (string),
 * {@code timestamp} (long, ms since the epoch); the Python side projects the sink's columns to these.
 */
final class StagedWriteSpec implements Serializable {
  private static final long serialVersionUID = 1L;
  static final String PRODUCER_PREFIX = "twophase.secret.producer.";
  private static final Pattern WRITE_ID = Pattern.compile("[A-Za-z0-9-]{1,128}");
  private static final StructType HEADER =
      new StructType().add("key", DataTypes.StringType).add("value", DataTypes.BinaryType);

  final String writeId;
  final String prefix;
  final String sink;
  final int slot;
  final long checkpointId;
  final String topic;
  final String lineageJob;
  final TreeMap<String, String> producer;
  final int keyIndex;
  final int valueIndex;
  final int headersIndex;
  final int partitionIndex;
  final int topicIndex;
  final int timestampIndex;

  private StagedWriteSpec(Map<String, String> options, StructType schema) {
    writeId = required(options, "twophase.write.id");
    if (!WRITE_ID.matcher(writeId).matches()) {
      throw new IllegalArgumentException("twophase.write.id must be [A-Za-z0-9-]{1,128}, got " + writeId);
    }
    prefix = required(options, "twophase.transactional.id.prefix");
    sink = required(options, "twophase.sink");
    slot = (int) nonNegative(options, "twophase.slot");
    checkpointId = nonNegative(options, "twophase.checkpoint");
    topic = options.get("twophase.topic");
    lineageJob = options.get("twophase.lineage.job");
    producer = new TreeMap<>();
    for (Map.Entry<String, String> e : options.entrySet()) {
      if (e.getKey().startsWith(PRODUCER_PREFIX)) {
        producer.put(e.getKey().substring(PRODUCER_PREFIX.length()), e.getValue());
      }
    }
    if (!producer.containsKey("bootstrap.servers")) {
      throw new IllegalArgumentException("the staged Kafka write needs " + PRODUCER_PREFIX + "bootstrap.servers");
    }
    valueIndex = column(schema, "value", DataTypes.BinaryType, true);
    keyIndex = column(schema, "key", DataTypes.BinaryType, false);
    headersIndex = column(schema, "headers", DataTypes.createArrayType(HEADER), false);
    partitionIndex = column(schema, "partition", DataTypes.IntegerType, false);
    topicIndex = column(schema, "topic", DataTypes.StringType, false);
    timestampIndex = column(schema, "timestamp", DataTypes.LongType, false);
    if (topic == null && topicIndex < 0) {
      throw new IllegalArgumentException("the staged Kafka write needs twophase.topic or a topic column");
    }
  }

  static StagedWriteSpec of(Map<String, String> options, StructType schema) {
    return new StagedWriteSpec(options, schema);
  }

  /** The transactional id of one task attempt: the Python sink's naming ({@code naming.transactional_id}). */
  String transactionalId(int partition, int attempt) {
    return prefix + "-" + sink + "-" + partition + "-" + slot + "-" + attempt;
  }

  /** The producer's settings, the transactional id added. */
  Properties producerProperties(String transactionalId) {
    Properties props = new Properties();
    props.putAll(producer);
    props.put("transactional.id", transactionalId);
    return props;
  }

  private static String required(Map<String, String> options, String key) {
    String value = options.get(key);
    if (value == null || value.isEmpty()) {
      throw new IllegalArgumentException("the staged Kafka write needs the option " + key);
    }
    return value;
  }

  private static long nonNegative(Map<String, String> options, String key) {
    long value;
    try {
      value = Long.parseLong(required(options, key));
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException(key + " must be an integer, got " + options.get(key));
    }
    if (value < 0 || value > Integer.MAX_VALUE && !key.equals("twophase.checkpoint")) {
      throw new IllegalArgumentException(key + " out of range: " + value);
    }
    return value;
  }

  private static int column(StructType schema, String name, DataType type, boolean needed) {
    for (int i = 0; i < schema.fields().length; i++) {
      StructField f = schema.fields()[i];
      if (f.name().equals(name)) {
        if (!sameType(f.dataType(), type)) {
          throw new IllegalArgumentException(
              "column " + name + " of the staged Kafka write must be " + type.simpleString() + ", got "
                  + f.dataType().simpleString());
        }
        return i;
      }
    }
    if (needed) {
      throw new IllegalArgumentException("the staged Kafka write needs a column " + name);
    }
    return -1;
  }

  private static boolean sameType(DataType actual, DataType wanted) {
    if (actual instanceof ArrayType && wanted instanceof ArrayType) {
      DataType a = ((ArrayType) actual).elementType();
      DataType w = ((ArrayType) wanted).elementType();
      if (a instanceof StructType && w instanceof StructType) {
        StructField[] af = ((StructType) a).fields();
        StructField[] wf = ((StructType) w).fields();
        if (af.length != wf.length) {
          return false;
        }
        for (int i = 0; i < af.length; i++) {
          if (!af[i].name().equals(wf[i].name()) || !af[i].dataType().equals(wf[i].dataType())) {
            return false;
          }
        }
        return true;
      }
    }
    return actual.equals(wanted);
  }
}
