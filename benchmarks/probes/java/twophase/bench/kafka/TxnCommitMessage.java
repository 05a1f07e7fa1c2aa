package twophase.bench.kafka;

import java.util.List;
import org.apache.spark.sql.connector.write.WriterCommitMessage;

/** One task's open transaction: what EndTxn needs, and what it wrote. */
public class TxnCommitMessage implements WriterCommitMessage {
  final String transactionalId;
  final long producerId;
  final short epoch;
  final List<Integer> partitions;
  final long records;
  final long openedMs;

  TxnCommitMessage(String transactionalId, long producerId, short epoch, List<Integer> partitions, long records, long openedMs) {
    this.transactionalId = transactionalId;
    this.producerId = producerId;
    this.epoch = epoch;
    this.partitions = partitions;
    this.records = records;
    this.openedMs = openedMs;
  }

  String toJson() {
    return "{\"transactional_id\":\"" + transactionalId + "\",\"producer_id\":" + producerId
        + ",\"producer_epoch\":" + epoch + ",\"partitions\":" + partitions + ",\"records\":" + records
        + ",\"opened_ms\":" + openedMs + "}";
  }
}
