package twophase.iceberg;

import java.util.Locale;
import java.util.UUID;
import org.apache.iceberg.PartitionSpec;
import org.apache.iceberg.StructLike;
import org.apache.iceberg.io.LocationProvider;
import org.apache.spark.TaskContext;

/**
 * Where the staged write's tasks put their data files: the Python path's layout
 * ({@code twophase.connectors.iceberg.internal.naming}), so the sink's lingering cleanup, abort and
 * recovery treat both paths' files alike:
 * {@code <data prefix>/[<partition path>/]part-<subtask:05d>-<checkpoint>-<attempt>-<uuid>.parquet}.
 * Subtask and attempt are the writing Spark task's partition and attempt number. Iceberg's writer
 * gives a name of its own, which is dropped (readers take everything from the manifests, Iceberg
 * table spec, "Manifests"). Serialized to the executors inside the table Iceberg's writer ships.
 */
final class StagedLocations implements LocationProvider {
  private static final long serialVersionUID = 1L;
  private final String dataPrefix;
  private final long checkpoint;

  StagedLocations(String dataPrefix, long checkpoint) {
    this.dataPrefix = dataPrefix;
    this.checkpoint = checkpoint;
  }

  @Override
  public String newDataLocation(String filename) {
    return dataPrefix + "/" + fileName();
  }

  @Override
  public String newDataLocation(PartitionSpec spec, StructLike partitionData, String filename) {
    String path = spec.isUnpartitioned() ? "" : spec.partitionToPath(partitionData);
    return path.isEmpty() ? newDataLocation(filename) : dataPrefix + "/" + path + "/" + fileName();
  }

  private String fileName() {
    TaskContext task = TaskContext.get();
    if (task == null) {
      throw new IllegalStateException("the staged Iceberg write names files only inside a Spark task");
    }
    String id = UUID.randomUUID().toString().replace("-", "");
    return String.format(
        Locale.ROOT,
        "part-%05d-%d-%d-%s.parquet",
        task.partitionId(),
        checkpoint,
        task.attemptNumber(),
        id);
  }
}
