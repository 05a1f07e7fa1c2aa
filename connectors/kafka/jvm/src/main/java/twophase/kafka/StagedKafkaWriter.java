package twophase.kafka;

import java.lang.reflect.Field;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.WriterCommitMessage;

/**
 * One task attempt's Kafka transaction: opened at the first row (initTransactions under the
 * attempt's own transactional id, which fences an earlier producer of that id; beginTransaction),
 * every row sent, and at the task's commit flushed and handed over open. The producer is closed
 * with a zero timeout, which leaves the transaction open (a graceful close would abort it), as
 * Flink's KafkaSink closes its pre-committed producers; the producer id and epoch are read from the
 * producer's transaction manager by reflection, as Flink's FlinkKafkaInternalProducer reads them
 * (kafka-clients has no public API for them). The offset after the last record acknowledged in
 * the first partition written is an offset the transaction's marker, which the commit's EndTxn
 * writes later, cannot precede: every delivery's metadata carries its offset, so no request reads
 * it. A task that wrote no row opens nothing.
 */
final class StagedKafkaWriter implements DataWriter<InternalRow> {
  private static final String JOB_HEADER = "twophase.job";
  private static final String CHECKPOINT_HEADER = "twophase.checkpoint";

  private final StagedWriteSpec spec;
  private final int partition;
  private final int attempt;
  private final String transactionalId;
  /** topic -> partition -> the highest offset acknowledged there (guarded by itself). */
  private final TreeMap<String, TreeMap<Integer, Long>> written = new TreeMap<>();
  private final AtomicReference<Exception> failure = new AtomicReference<>();
  private final byte[] jobHeader;
  private final byte[] checkpointHeader;
  private KafkaProducer<byte[], byte[]> producer;
  private long records;
  private long openedMs;

  StagedKafkaWriter(StagedWriteSpec spec, int partition, int attempt) {
    this.spec = spec;
    this.partition = partition;
    this.attempt = attempt;
    this.transactionalId = spec.transactionalId(partition, attempt);
    this.jobHeader = spec.lineageJob == null ? null : spec.lineageJob.getBytes(StandardCharsets.UTF_8);
    this.checkpointHeader = Long.toString(spec.checkpointId).getBytes(StandardCharsets.US_ASCII);
  }

  @Override
  public void write(InternalRow row) {
    if (producer == null) {
      open();
    }
    failIfSendFailed();
    String topic = spec.topicIndex >= 0 && !row.isNullAt(spec.topicIndex)
        ? row.getString(spec.topicIndex) : spec.topic;
    if (topic == null) {
      throw new IllegalArgumentException(where() + ": a row's topic is null and the sink has no topic");
    }
    Integer kafkaPartition = spec.partitionIndex >= 0 && !row.isNullAt(spec.partitionIndex)
        ? row.getInt(spec.partitionIndex) : null;
    Long timestamp = null;
    if (spec.timestampIndex >= 0 && !row.isNullAt(spec.timestampIndex)) {
      long ms = row.getLong(spec.timestampIndex);
      if (ms < 0) {
        throw new IllegalArgumentException(where() + ": a Kafka record's timestamp cannot precede 1970-01-01");
      }
      timestamp = ms == 0 ? null : ms; // 0: the time of producing, as the Python path's librdkafka takes it
    }
    byte[] key = spec.keyIndex >= 0 && !row.isNullAt(spec.keyIndex) ? row.getBinary(spec.keyIndex) : null;
    byte[] value = row.isNullAt(spec.valueIndex) ? null : row.getBinary(spec.valueIndex);
    RecordHeaders headers = headers(row);
    ProducerRecord<byte[], byte[]> record =
        new ProducerRecord<>(topic, kafkaPartition, timestamp, key, value, headers);
    producer.send(record, (metadata, error) -> {
      if (error != null) {
        failure.compareAndSet(null, error);
      } else {
        synchronized (written) {
          written.computeIfAbsent(metadata.topic(), t -> new TreeMap<>())
              .merge(metadata.partition(), metadata.offset(), Math::max);
        }
      }
    });
    records++;
  }

  @Override
  public WriterCommitMessage commit() {
    if (producer == null) {
      return StagedTransaction.empty(partition, attempt);
    }
    producer.flush();
    failIfSendFailed();
    long producerId;
    short epoch;
    try {
      Field manager = KafkaProducer.class.getDeclaredField("transactionManager");
      manager.setAccessible(true);
      Object tm = manager.get(producer);
      Field field = tm.getClass().getDeclaredField("producerIdAndEpoch");
      field.setAccessible(true);
      Object idAndEpoch = field.get(tm);
      producerId = idAndEpoch.getClass().getField("producerId").getLong(idAndEpoch);
      epoch = idAndEpoch.getClass().getField("epoch").getShort(idAndEpoch);
    } catch (ReflectiveOperationException e) {
      throw new IllegalStateException(where() + ": cannot read the producer id and epoch", e);
    }
    if (producerId < 0 || epoch < 0) {
      throw new IllegalStateException(where() + ": the producer has no id (fenced or failed)");
    }
    List<String> topics = new ArrayList<>();
    List<Integer> partitions = new ArrayList<>();
    Long marker = null;
    synchronized (written) {
      for (Map.Entry<String, TreeMap<Integer, Long>> topic : written.entrySet()) {
        for (Map.Entry<Integer, Long> p : topic.getValue().entrySet()) {
          if (topics.isEmpty() && p.getValue() >= 0) {
            marker = p.getValue() + 1; // the first partition's: after its last record of this transaction
          }
          topics.add(topic.getKey());
          partitions.add(p.getKey());
        }
      }
    }
    KafkaProducer<byte[], byte[]> open = producer;
    producer = null;
    open.close(Duration.ZERO); // leaves the transaction open for the driver's EndTxn
    return new StagedTransaction(
        partition, attempt, transactionalId, producerId, epoch, topics, partitions, records, openedMs, marker);
  }

  @Override
  public void abort() {
    if (producer == null) {
      return;
    }
    KafkaProducer<byte[], byte[]> open = producer;
    producer = null;
    try {
      open.abortTransaction();
    } catch (RuntimeException e) {
      // fenced or failed: the lingering cleanup aborts what is still open
    } finally {
      open.close(Duration.ZERO);
    }
  }

  @Override
  public void close() {
    if (producer != null) {
      producer.close(Duration.ZERO);
      producer = null;
    }
  }

  private void open() {
    openedMs = System.currentTimeMillis();
    producer = new KafkaProducer<>(
        spec.producerProperties(transactionalId), new ByteArraySerializer(), new ByteArraySerializer());
    producer.initTransactions();
    producer.beginTransaction();
  }

  private RecordHeaders headers(InternalRow row) {
    RecordHeaders headers = new RecordHeaders();
    if (spec.headersIndex >= 0 && !row.isNullAt(spec.headersIndex)) {
      ArrayData array = row.getArray(spec.headersIndex);
      for (int i = 0; i < array.numElements(); i++) {
        if (array.isNullAt(i)) {
          continue;
        }
        InternalRow h = array.getStruct(i, 2);
        headers.add(h.getString(0), h.isNullAt(1) ? null : h.getBinary(1));
      }
    }
    if (jobHeader != null) {
      headers.add(JOB_HEADER, jobHeader);
      headers.add(CHECKPOINT_HEADER, checkpointHeader);
    }
    return headers;
  }

  private void failIfSendFailed() {
    Exception e = failure.get();
    if (e != null) {
      throw new IllegalStateException(where() + ": a record was not delivered: " + e, e);
    }
  }

  private String where() {
    return "Kafka sink " + spec.sink + " partition " + partition + " (checkpoint " + spec.checkpointId
        + ", transactional id " + transactionalId + ")";
  }
}
