package twophase.iceberg;

import java.util.Arrays;
import java.util.Map;

/**
 * One staged write's options, checked on the driver before any task runs.
 *
 * <ul>
 *   <li>{@code twophase.write.id}: the hand-off's key ({@link StagedIcebergWrites#take});
 *   <li>{@code twophase.catalog}: the session's Iceberg catalog ({@code spark.sql.catalog.<name>});
 *   <li>{@code twophase.table}: {@code <namespace>.<table>} in it;
 *   <li>{@code twophase.table.uuid}: the table's {@code table-uuid} as the sink's own catalog loads
 *       it: the session's catalog must name the same table;
 *   <li>{@code twophase.data.prefix}: the job's data prefix, where the files go;
 *   <li>{@code twophase.checkpoint}: the checkpoint id, in the file names.
 * </ul>
 */
final class StagedWriteSpec {
  final String writeId;
  final String catalog;
  final String[] namespace;
  final String table;
  final String tableUuid;
  final String dataPrefix;
  final long checkpoint;

  private StagedWriteSpec(
      String writeId,
      String catalog,
      String[] namespace,
      String table,
      String tableUuid,
      String dataPrefix,
      long checkpoint) {
    this.writeId = writeId;
    this.catalog = catalog;
    this.namespace = namespace;
    this.table = table;
    this.tableUuid = tableUuid;
    this.dataPrefix = dataPrefix;
    this.checkpoint = checkpoint;
  }

  /**
   * The spec of {@code options}.
   *
   * @throws IllegalArgumentException an option missing or malformed, named
   */
  static StagedWriteSpec of(Map<String, String> options) {
    String table = required(options, "twophase.table");
    String[] parts = table.split("\\.");
    if (parts.length < 2 || Arrays.stream(parts).anyMatch(String::isEmpty)) {
      throw new IllegalArgumentException(
          "twophase.table must be '<namespace>.<table>', got '" + table + "'");
    }
    long checkpoint;
    try {
      checkpoint = Long.parseLong(required(options, "twophase.checkpoint"));
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException("twophase.checkpoint must be a checkpoint id", e);
    }
    if (checkpoint < 0) {
      throw new IllegalArgumentException("twophase.checkpoint must be >= 0, got " + checkpoint);
    }
    return new StagedWriteSpec(
        required(options, "twophase.write.id"),
        required(options, "twophase.catalog"),
        Arrays.copyOf(parts, parts.length - 1),
        parts[parts.length - 1],
        required(options, "twophase.table.uuid"),
        required(options, "twophase.data.prefix").replaceAll("/+$", ""),
        checkpoint);
  }

  private static String required(Map<String, String> options, String key) {
    String value = options.get(key);
    if (value == null || value.isEmpty()) {
      throw new IllegalArgumentException("the staged Iceberg write needs the option " + key);
    }
    return value;
  }
}
