package twophase.iceberg;

import java.lang.reflect.Constructor;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.EnumSet;
import java.util.Set;
import org.apache.iceberg.BaseTable;
import org.apache.iceberg.HasTableOperations;
import org.apache.iceberg.Table;
import org.apache.iceberg.TableOperations;
import org.apache.iceberg.io.LocationProvider;
import org.apache.iceberg.spark.Spark3Util;
import org.apache.iceberg.spark.source.SparkTable;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.TableCatalog;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.types.StructType;

/**
 * The staged write's table: batch appends through Iceberg's own Spark writer into the Iceberg
 * table the options name, its data files placed by {@link StagedLocations}, nothing to read.
 */
final class StagedIcebergTable implements SupportsWrite {
  private final StructType schema;

  StagedIcebergTable(StructType schema) {
    this.schema = schema;
  }

  @Override
  public String name() {
    return "twophase-iceberg-staged";
  }

  @Override
  public StructType schema() {
    return schema;
  }

  @Override
  public Set<TableCapability> capabilities() {
    // Iceberg's writer checks the rows against the table's schema itself
    return EnumSet.of(TableCapability.BATCH_WRITE, TableCapability.ACCEPT_ANY_SCHEMA);
  }

  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    // on the driver, before any task runs: the options, the table and its identity
    StagedWriteSpec spec = StagedWriteSpec.of(info.options().asCaseSensitiveMap());
    Table table = load(spec);
    WriteBuilder iceberg = sparkTable(table).newWriteBuilder(info);
    return new WriteBuilder() {
      @Override
      public Write build() {
        return new StagedIcebergWrite(iceberg.build(), spec, table);
      }
    };
  }

  /**
   * The table of {@code spec}, read fresh from the session's Iceberg catalog and placing its data
   * files with {@link StagedLocations}. The catalog's cached entry is dropped after the load: the
   * sink commits outside Spark, and an entry kept warm by every epoch's write would keep the
   * session's readers on the metadata of before the commit (Iceberg's CachingCatalog expires
   * entries after access).
   *
   * @throws IllegalArgumentException the catalog's table is not the one the sink's catalog loads
   *     (another {@code table-uuid}), or is not an Iceberg table of a catalog with table operations
   */
  private static Table load(StagedWriteSpec spec) {
    List<String> parts = new ArrayList<>();
    parts.add(spec.catalog);
    parts.addAll(Arrays.asList(spec.namespace));
    parts.add(spec.table);
    String name = String.join(".", parts);
    Table table;
    try {
      Spark3Util.CatalogAndIdentifier found = Spark3Util.catalogAndIdentifier(SparkSession.active(), parts);
      TableCatalog catalog = found.tableCatalog();
      catalog.invalidateTable(found.identifier());
      table = Spark3Util.toIcebergTable(catalog.loadTable(found.identifier()));
      catalog.invalidateTable(found.identifier());
    } catch (Exception e) {
      throw new IllegalArgumentException(
          "the staged Iceberg write cannot load " + name + " from the session's catalogs: " + e, e);
    }
    if (!(table instanceof HasTableOperations)) {
      throw new IllegalArgumentException(
          name + " has no table operations: a staged write needs a catalog table");
    }
    TableOperations ops = ((HasTableOperations) table).operations();
    String uuid = ops.current().uuid();
    if (!spec.tableUuid.equals(uuid)) {
      throw new IllegalArgumentException(
          "Spark catalog '" + spec.catalog + "' names table " + uuid + " as " + name
              + ", the Iceberg sink's catalog table " + spec.tableUuid
              + ": point both at the same catalog");
    }
    return new PlacedTable(ops, table.name(), new StagedLocations(spec.dataPrefix, spec.checkpoint));
  }

  private static SupportsWrite sparkTable(Table table) {
    // SparkTable(Table) from Iceberg 1.10 on, SparkTable(Table, boolean refreshEagerly) before it
    try {
      for (Constructor<?> c : SparkTable.class.getConstructors()) {
        Class<?>[] params = c.getParameterTypes();
        if (params.length == 1 && params[0] == Table.class) {
          return (SupportsWrite) c.newInstance(table);
        }
        if (params.length == 2 && params[0] == Table.class && params[1] == boolean.class) {
          return (SupportsWrite) c.newInstance(table, false);
        }
      }
    } catch (ReflectiveOperationException e) {
      throw new IllegalStateException("cannot make Iceberg's SparkTable", e);
    }
    throw new IllegalStateException("this Iceberg runtime's SparkTable has no known constructor");
  }

  /** The catalog's table with its data files placed by the staged write's locations. */
  static final class PlacedTable extends BaseTable {
    private static final long serialVersionUID = 1L;
    private final StagedLocations locations;

    PlacedTable(TableOperations ops, String name, StagedLocations locations) {
      super(ops, name);
      this.locations = locations;
    }

    @Override
    public LocationProvider locationProvider() {
      return locations;
    }
  }
}
