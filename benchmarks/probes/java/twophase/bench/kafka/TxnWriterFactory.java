package twophase.bench.kafka;

import java.util.HashMap;
import java.util.Map;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.types.StructType;

/** Shipped to the executors: makes one transactional writer per task attempt. */
public class TxnWriterFactory implements DataWriterFactory {
  private final HashMap<String, String> options;
  private final StructType schema;

  TxnWriterFactory(Map<String, String> options, StructType schema) {
    this.options = new HashMap<>(options);
    this.schema = schema;
  }

  @Override
  public DataWriter<InternalRow> createWriter(int partitionId, long taskId) {
    return new TxnDataWriter(options, schema, partitionId, taskId);
  }
}
