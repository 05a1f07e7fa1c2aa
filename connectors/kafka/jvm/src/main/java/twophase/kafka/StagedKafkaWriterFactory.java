package twophase.kafka;

import org.apache.spark.TaskContext;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.DataWriterFactory;

/** Shipped to the executors: one transactional writer per task attempt. */
final class StagedKafkaWriterFactory implements DataWriterFactory {
  private static final long serialVersionUID = 1L;
  private final StagedWriteSpec spec;

  StagedKafkaWriterFactory(StagedWriteSpec spec) {
    this.spec = spec;
  }

  @Override
  public DataWriter<InternalRow> createWriter(int partitionId, long taskId) {
    TaskContext task = TaskContext.get();
    return new StagedKafkaWriter(spec, partitionId, task == null ? 0 : task.attemptNumber());
  }
}
