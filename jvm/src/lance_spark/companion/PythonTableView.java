package lance_spark.companion;

import java.util.Map;
import java.util.Set;
import java.util.regex.Pattern;

import org.apache.spark.sql.connector.catalog.Column;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import org.apache.spark.sql.execution.datasources.v2.python.PythonTable;
import org.apache.spark.sql.types.StructType;

/**
 * A {@code lance} Python table seen through the companion: name, schema, columns, partitioning,
 * properties and capabilities are the Python table's; subclasses replace the read
 * ({@link LanceScanTable}) or the write ({@link LanceWriteTable}).
 *
 * <p>Spark internals: {@code PythonTable}; {@code DataSourceV2Relation.copy}.
 */
abstract class PythonTableView implements Table {
  static final String FORMAT = "lance";
  // The private formats lance_spark registers for reads whose storage options differ from the
  // session's (lance_spark.source.session._format_for): lance_storage_1, lance_storage_2, ...
  private static final Pattern PRIVATE_FORMAT = Pattern.compile("lance_storage_\\d+");

  protected final PythonTable python;

  PythonTableView(PythonTable python) {
    this.python = python;
  }

  /** {@code table} as a {@code lance} Python table, or null when it is not one. */
  static PythonTable lanceTable(Table table) {
    if (table instanceof PythonTable python && isLanceFormat(python.name())) {
      return python;
    }
    return null;
  }

  /** {@code lance} or one of lance_spark's private formats (a table's own storage options). */
  static boolean isLanceFormat(String name) {
    return FORMAT.equalsIgnoreCase(name) || PRIVATE_FORMAT.matcher(name).matches();
  }

  /** {@code relation} reading or writing {@code table} instead of its own. */
  static DataSourceV2Relation withTable(DataSourceV2Relation relation, Table table) {
    return relation.copy(
        table,
        relation.output(),
        relation.catalog(),
        relation.identifier(),
        relation.options(),
        relation.timeTravelSpec());
  }

  @Override
  public String name() {
    return python.name();
  }

  @Override
  @SuppressWarnings("deprecation")
  public StructType schema() {
    return python.schema();
  }

  @Override
  public Column[] columns() {
    return python.columns();
  }

  @Override
  public Transform[] partitioning() {
    return python.partitioning();
  }

  @Override
  public Map<String, String> properties() {
    return python.properties();
  }

  @Override
  public Set<TableCapability> capabilities() {
    return python.capabilities();
  }
}
