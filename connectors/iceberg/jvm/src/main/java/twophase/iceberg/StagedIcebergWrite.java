package twophase.iceberg;

import org.apache.iceberg.Table;
import org.apache.spark.sql.connector.distributions.Distribution;
import org.apache.spark.sql.connector.distributions.Distributions;
import org.apache.spark.sql.connector.expressions.SortOrder;
import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.RequiresDistributionAndOrdering;
import org.apache.spark.sql.connector.write.Write;

/**
 * Iceberg's write with its job commit replaced: the distribution, ordering and metrics Iceberg's
 * writer asks of Spark are its own, the batch is {@link StagedIcebergBatch}.
 */
final class StagedIcebergWrite implements RequiresDistributionAndOrdering {
  private final Write iceberg;
  private final StagedWriteSpec spec;
  private final Table table;

  StagedIcebergWrite(Write iceberg, StagedWriteSpec spec, Table table) {
    this.iceberg = iceberg;
    this.spec = spec;
    this.table = table;
  }

  private RequiresDistributionAndOrdering required() {
    return iceberg instanceof RequiresDistributionAndOrdering
        ? (RequiresDistributionAndOrdering) iceberg
        : null;
  }

  @Override
  public Distribution requiredDistribution() {
    RequiresDistributionAndOrdering r = required();
    return r == null ? Distributions.unspecified() : r.requiredDistribution();
  }

  @Override
  public boolean distributionStrictlyRequired() {
    RequiresDistributionAndOrdering r = required();
    return r == null || r.distributionStrictlyRequired();
  }

  @Override
  public int requiredNumPartitions() {
    RequiresDistributionAndOrdering r = required();
    return r == null ? 0 : r.requiredNumPartitions();
  }

  @Override
  public long advisoryPartitionSizeInBytes() {
    RequiresDistributionAndOrdering r = required();
    return r == null ? 0 : r.advisoryPartitionSizeInBytes();
  }

  @Override
  public SortOrder[] requiredOrdering() {
    RequiresDistributionAndOrdering r = required();
    return r == null ? new SortOrder[0] : r.requiredOrdering();
  }

  @Override
  public String description() {
    return "twophase staged " + iceberg.description();
  }

  @Override
  public BatchWrite toBatch() {
    return new StagedIcebergBatch(iceberg.toBatch(), spec, table);
  }

  @Override
  public CustomMetric[] supportedCustomMetrics() {
    return iceberg.supportedCustomMetrics();
  }

  @Override
  public CustomTaskMetric[] reportDriverMetrics() {
    return iceberg.reportDriverMetrics();
  }
}
