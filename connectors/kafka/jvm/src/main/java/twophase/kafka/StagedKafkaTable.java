package twophase.kafka;

import java.util.EnumSet;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.types.StructType;

/** The staged write's table: batch appends of the sink's projection, nothing to read. */
final class StagedKafkaTable implements SupportsWrite {
  private final StructType schema;

  StagedKafkaTable(StructType schema) {
    this.schema = schema;
  }

  @Override
  public String name() {
    return "twophase-kafka-staged";
  }

  @Override
  public StructType schema() {
    return schema;
  }

  @Override
  public Set<TableCapability> capabilities() {
    return EnumSet.of(TableCapability.BATCH_WRITE, TableCapability.ACCEPT_ANY_SCHEMA);
  }

  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    // the options are checked here, on the driver, before any task runs
    StagedWriteSpec spec = StagedWriteSpec.of(info.options().asCaseSensitiveMap(), info.schema());
    return new WriteBuilder() {
      @Override
      public Write build() {
        return new Write() {
          @Override
          public BatchWrite toBatch() {
            return new StagedKafkaWrite(spec);
          }
        };
      }
    };
  }
}
