package twophase.bench.kafka;

import java.util.EnumSet;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.types.StructType;

/** The probe's table: batch writes only. */
public class TxnKafkaTable implements SupportsWrite {
  private final StructType schema;

  TxnKafkaTable(StructType schema) {
    this.schema = schema;
  }

  @Override public String name() { return "twophase-kafka-probe"; }
  @Override public StructType schema() { return schema; }

  @Override
  public Set<TableCapability> capabilities() {
    return EnumSet.of(TableCapability.BATCH_WRITE, TableCapability.ACCEPT_ANY_SCHEMA);
  }

  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    return new WriteBuilder() {
      @Override
      public Write build() {
        return new Write() {
          @Override
          public BatchWrite toBatch() {
            return new TxnBatchWrite(info.options().asCaseSensitiveMap(), info.schema());
          }
        };
      }
    };
  }
}
