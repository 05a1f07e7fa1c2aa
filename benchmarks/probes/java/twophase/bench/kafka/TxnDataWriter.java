package twophase.bench.kafka;

import java.lang.reflect.Field;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Map;
import java.util.Properties;
import java.util.TreeSet;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.types.StructType;

/**
 * One task attempt's transaction: init, begin, send every row, and at the task commit flush and
 * hand over (id, producer id, epoch) without committing. The producer is closed with a zero
 * timeout, which leaves the transaction open (a graceful close would abort it): Flink's KafkaSink
 * does the same. The producer id and epoch are read from the producer's transaction manager by
 * reflection, as Flink's FlinkKafkaInternalProducer reads them (kafka-clients has no public API).
 */
public class TxnDataWriter implements DataWriter<InternalRow> {
  private static final String PRODUCER_PREFIX = "kafka.";
  private final KafkaProducer<byte[], byte[]> producer;
  private final String topic;
  private final String transactionalId;
  private final int keyIndex;
  private final int valueIndex;
  private final TreeSet<Integer> partitions = new TreeSet<>();
  private final long openedMs = System.currentTimeMillis();
  private long records;

  TxnDataWriter(Map<String, String> options, StructType schema, int partitionId, long taskId) {
    Properties props = new Properties();
    for (Map.Entry<String, String> e : options.entrySet()) {
      if (e.getKey().startsWith(PRODUCER_PREFIX)) {
        props.put(e.getKey().substring(PRODUCER_PREFIX.length()), e.getValue());
      }
    }
    transactionalId = options.get("transactional.id.prefix") + "-" + partitionId + "-" + taskId;
    props.put("transactional.id", transactionalId);
    topic = options.get("topic");
    keyIndex = schema.fieldIndex("key");
    valueIndex = schema.fieldIndex("value");
    producer = new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer());
    producer.initTransactions();
    producer.beginTransaction();
  }

  @Override
  public void write(InternalRow row) {
    byte[] key = row.isNullAt(keyIndex) ? null : row.getBinary(keyIndex);
    producer.send(new ProducerRecord<>(topic, key, row.getBinary(valueIndex)), (metadata, error) -> {
      if (metadata != null) {
        synchronized (partitions) {
          partitions.add(metadata.partition());
        }
      }
    });
    records++;
  }

  @Override
  public WriterCommitMessage commit() {
    producer.flush();
    long producerId;
    short epoch;
    try {
      Field tm = KafkaProducer.class.getDeclaredField("transactionManager");
      tm.setAccessible(true);
      Object manager = tm.get(producer);
      Field pe = manager.getClass().getDeclaredField("producerIdAndEpoch");
      pe.setAccessible(true);
      Object idAndEpoch = pe.get(manager);
      producerId = idAndEpoch.getClass().getField("producerId").getLong(idAndEpoch);
      epoch = idAndEpoch.getClass().getField("epoch").getShort(idAndEpoch);
    } catch (ReflectiveOperationException e) {
      throw new IllegalStateException("cannot read the producer id and epoch", e);
    }
    producer.close(Duration.ZERO);
    synchronized (partitions) {
      return new TxnCommitMessage(transactionalId, producerId, epoch, new ArrayList<>(partitions), records, openedMs);
    }
  }

  @Override
  public void abort() {
    producer.abortTransaction();
    producer.close(Duration.ZERO);
  }

  @Override
  public void close() {
  }
}
