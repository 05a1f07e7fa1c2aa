package twophase.iceberg;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.FileFormat;
import org.apache.iceberg.HasTableOperations;
import org.apache.iceberg.PartitionSpec;
import org.apache.iceberg.Table;
import org.apache.iceberg.types.Conversions;
import org.apache.iceberg.types.Type;
import org.apache.iceberg.types.Types;
import org.apache.iceberg.util.ByteBuffers;

/**
 * The hand-off from a finished staged write's job commit (on the driver's JVM) to the sink's
 * Python driver, which takes it through py4j right after the write returns: one JSON object by the
 * write's id, holding the table's {@code table-uuid} and schema id and, per Spark task in partition
 * order, its data files as an Iceberg manifest entry needs them (Iceberg table spec, "Manifests":
 * the partition tuple and the bounds in the single-value serialization of Appendix D, base64).
 * Nothing here is durable: the sink persists the files in its checkpoint before any is committed,
 * and a driver that dies first leaves them to the lingering cleanup.
 */
public final class StagedIcebergWrites {
  private static final Map<String, String> WRITES = new ConcurrentHashMap<>();
  private static final ObjectMapper JSON = new ObjectMapper();

  private StagedIcebergWrites() {}

  static void put(String writeId, String handed) {
    WRITES.put(writeId, handed);
  }

  /**
   * The files of write {@code writeId} as one JSON object, removed from here; {@code null} when no
   * job commit handed any over under that id (the write failed, or was taken already).
   */
  public static String take(String writeId) {
    return WRITES.remove(writeId);
  }

  static String encode(Table table, List<List<DataFile>> tasks) {
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("table_uuid", ((HasTableOperations) table).operations().current().uuid());
    out.put("schema_id", table.schema().schemaId());
    List<List<Map<String, Object>>> encoded = new ArrayList<>(tasks.size());
    for (List<DataFile> files : tasks) {
      List<Map<String, Object>> rows = new ArrayList<>(files.size());
      for (DataFile f : files) {
        rows.add(file(table, f));
      }
      encoded.add(rows);
    }
    out.put("tasks", encoded);
    try {
      return JSON.writeValueAsString(out);
    } catch (JsonProcessingException e) {
      throw new IllegalStateException("cannot encode the staged write's data files", e);
    }
  }

  private static Map<String, Object> file(Table table, DataFile f) {
    if (f.format() != FileFormat.PARQUET) {
      throw new IllegalStateException(
          "the staged Iceberg write wrote " + f.format() + " file " + f.path() + "; the sink commits Parquet only");
    }
    PartitionSpec spec = table.specs().get(f.specId());
    List<Types.NestedField> fields = spec.partitionType().fields();
    List<String> partition = new ArrayList<>(fields.size());
    for (int i = 0; i < fields.size(); i++) {
      Type type = fields.get(i).type();
      Object value = f.partition().get(i, type.typeId().javaClass());
      partition.add(value == null ? null : base64(Conversions.toByteBuffer(type, value)));
    }
    Map<String, Object> m = new LinkedHashMap<>();
    m.put("path", f.path().toString());
    m.put("size", f.fileSizeInBytes());
    m.put("record_count", f.recordCount());
    m.put("spec_id", f.specId());
    m.put("partition", partition);
    m.put("column_sizes", counts(f.columnSizes()));
    m.put("value_counts", counts(f.valueCounts()));
    m.put("null_value_counts", counts(f.nullValueCounts()));
    m.put("nan_value_counts", counts(f.nanValueCounts()));
    m.put("lower_bounds", bounds(f.lowerBounds()));
    m.put("upper_bounds", bounds(f.upperBounds()));
    m.put("split_offsets", f.splitOffsets() == null ? List.of() : f.splitOffsets());
    return m;
  }

  private static List<List<Object>> counts(Map<Integer, Long> values) {
    List<List<Object>> out = new ArrayList<>();
    if (values != null) {
      new TreeMap<>(values).forEach((id, v) -> out.add(List.of(id, v)));
    }
    return out;
  }

  private static List<List<Object>> bounds(Map<Integer, ByteBuffer> values) {
    List<List<Object>> out = new ArrayList<>();
    if (values != null) {
      new TreeMap<>(values).forEach((id, v) -> out.add(List.of(id, base64(v))));
    }
    return out;
  }

  private static String base64(ByteBuffer value) {
    return Base64.getEncoder().encodeToString(ByteBuffers.toByteArray(value));
  }
}
