package twophase.kafka;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.connector.write.WriterCommitMessage;

/**
 * What one task attempt left open: what EndTxn needs (transactional id, producer id and epoch;
 * KIP-98) and what locates the transaction's marker in the log after the broker forgot the id (the
 * partitions written, when it was opened, an offset the marker cannot precede): the fields of the
 * Python sink's {@code KafkaCommittable}. {@code records} 0: the task wrote nothing and opened no
 * transaction.
 */
final class StagedTransaction implements WriterCommitMessage {
  private static final long serialVersionUID = 1L;

  final int partition;
  final int attempt;
  final String transactionalId;
  final long producerId;
  final short producerEpoch;
  final List<String> topics;
  final List<Integer> topicPartitions;
  final long records;
  final long openedMs;
  final Long markerOffset;

  StagedTransaction(
      int partition,
      int attempt,
      String transactionalId,
      long producerId,
      short producerEpoch,
      List<String> topics,
      List<Integer> topicPartitions,
      long records,
      long openedMs,
      Long markerOffset) {
    this.partition = partition;
    this.attempt = attempt;
    this.transactionalId = transactionalId;
    this.producerId = producerId;
    this.producerEpoch = producerEpoch;
    this.topics = topics;
    this.topicPartitions = topicPartitions;
    this.records = records;
    this.openedMs = openedMs;
    this.markerOffset = markerOffset;
  }

  static StagedTransaction empty(int partition, int attempt) {
    return new StagedTransaction(partition, attempt, null, -1, (short) -1, List.of(), List.of(), 0, 0, null);
  }

  /** The hand-off's form: a JSON object (snake-case keys, as the Python sink names them). */
  Map<String, Object> toMap() {
    Map<String, Object> m = new LinkedHashMap<>();
    m.put("partition", partition);
    m.put("attempt", attempt);
    m.put("transactional_id", transactionalId);
    m.put("producer_id", producerId);
    m.put("producer_epoch", producerEpoch);
    List<List<Object>> written = new ArrayList<>();
    for (int i = 0; i < topics.size(); i++) {
      written.add(List.of(topics.get(i), topicPartitions.get(i)));
    }
    m.put("topic_partitions", written);
    m.put("records", records);
    m.put("opened_ms", openedMs);
    m.put("marker_offset", markerOffset);
    return m;
  }
}
