package twophase.kafka;

import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.WriterCommitMessage;

/**
 * The driver half of one staged write. Spark's output commit coordination lets one attempt of each
 * task commit ({@link #useCommitCoordinator}), so the job commit receives one open transaction per
 * task that wrote rows, and hands them over under the write's id. A job abort aborts nothing: what
 * the tasks left open is no checkpoint's, and the sink's lingering cleanup aborts it (its ids are
 * the sink's own: {@code <prefix>-<sink>-<partition>-<slot>-<attempt>}).
 */
final class StagedKafkaWrite implements BatchWrite {
  private final StagedWriteSpec spec;

  StagedKafkaWrite(StagedWriteSpec spec) {
    this.spec = spec;
  }

  @Override
  public DataWriterFactory createBatchWriterFactory(PhysicalWriteInfo info) {
    return new StagedKafkaWriterFactory(spec);
  }

  @Override
  public boolean useCommitCoordinator() {
    return true;
  }

  @Override
  public void commit(WriterCommitMessage[] messages) {
    List<StagedTransaction> open = new ArrayList<>();
    for (WriterCommitMessage m : messages) {
      if (m instanceof StagedTransaction && ((StagedTransaction) m).records > 0) {
        open.add((StagedTransaction) m);
      }
    }
    StagedWrites.put(spec.writeId, open);
  }

  @Override
  public void abort(WriterCommitMessage[] messages) {
    // nothing here: the open transactions are the sink's lingering cleanup's to abort
  }
}
