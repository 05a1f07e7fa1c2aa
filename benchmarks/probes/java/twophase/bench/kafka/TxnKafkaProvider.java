package twophase.bench.kafka;

import java.util.Map;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A probe of a JVM-side Kafka write for two-phase commit (benchmarks only): each Spark task writes
 * its rows (binary "key", "value") in a Kafka transaction of its own, flushes, and leaves the
 * transaction open; the job commit writes each task's transactional id, producer id and epoch to
 * a local file (option "committables") for a driver to commit with EndTxn, as the 2PC Kafka sink
 * commits its own.
 */
public class TxnKafkaProvider implements TableProvider {
  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    throw new UnsupportedOperationException("write only: the DataFrame's schema is used");
  }

  @Override
  public boolean supportsExternalMetadata() {
    return true;
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return new TxnKafkaTable(schema);
  }
}
