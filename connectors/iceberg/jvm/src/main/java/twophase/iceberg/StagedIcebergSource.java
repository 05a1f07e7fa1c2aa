package twophase.iceberg;

import java.util.Map;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The Iceberg sink's Spark-staged write as a DataSource V2 source, write only
 * ({@code df.write.format("twophase.iceberg.StagedIcebergSource")}): Iceberg's own Spark writer
 * writes each task's Parquet data files, under the sink's job data prefix and file names
 * ({@link StagedLocations}), and the write's job commit hands the files to the sink's driver
 * ({@link StagedIcebergWrites}) instead of committing a snapshot. The driver persists them in its
 * checkpoint and commits them in its one append per checkpoint once the checkpoint completes
 * (FLIP-143's committer; Iceberg table spec, "Commit Conflict Resolution and Retry"). The options
 * are {@link StagedWriteSpec}'s; the table is loaded from an Iceberg catalog of the session.
 */
public class StagedIcebergSource implements TableProvider {
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
    return new StagedIcebergTable(schema);
  }
}
