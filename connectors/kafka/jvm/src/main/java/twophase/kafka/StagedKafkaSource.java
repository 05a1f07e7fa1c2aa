package twophase.kafka;

import java.util.Map;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The Kafka sink's Spark-staged write as a DataSource V2 source, write only
 * ({@code df.write.format("twophase.kafka.StagedKafkaSource")}): each task writes its rows in a Kafka
 * transaction of its own and leaves it open; the write's commit hands the open transactions to
 * the sink's driver ({@link StagedWrites}), which persists them in its checkpoint and commits them
 * with EndTxn once the checkpoint completes (KIP-98; FLIP-143's committer). The options are
 * {@link StagedWriteSpec}'s; the rows are the sink's projection (binary key and value, optional
 * headers, partition, topic and timestamp).
 */
public class StagedKafkaSource implements TableProvider {
  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    throw new UnsupportedOperationException("a write-only source: the DataFrame's schema is used");
  }

  @Override
  public boolean supportsExternalMetadata() {
    return true;
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return new StagedKafkaTable(schema);
  }
}
