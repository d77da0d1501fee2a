package lance_spark.companion;

import java.lang.reflect.Field;

import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.execution.datasources.v2.python.PythonTable;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A {@code lance} Python table as the read side sees it: everything is the Python table's, but
 * {@link #newScanBuilder} returns a {@link LanceScanBuilder} (pruning, LIMIT, COUNT, statistics,
 * columnar output, read state per scan) instead of Spark's {@code PythonScanBuilder}.
 *
 * <p>Spark internals: {@code PythonTable} and its private field {@code ds} (the
 * {@code PythonDataSourceV2} that holds the Python data source class and the pickled instance).
 */
final class LanceScanTable extends PythonTableView implements SupportsRead {
  private static final Field DATA_SOURCE = dataSourceField();

  private final PythonDataSourceV2 dataSource;

  private LanceScanTable(PythonTable python, PythonDataSourceV2 dataSource) {
    super(python);
    this.dataSource = dataSource;
  }

  /** The table to read {@code table} with, or null when it is not a {@code lance} Python table. */
  static LanceScanTable wrap(Table table) {
    PythonTable python = lanceTable(table);
    if (python == null) {
      return null;
    }
    try {
      return new LanceScanTable(python, (PythonDataSourceV2) DATA_SOURCE.get(python));
    } catch (IllegalAccessException e) {
      throw new IllegalStateException("lance_spark companion: cannot read PythonTable.ds", e);
    }
  }

  private static Field dataSourceField() {
    try {
      Field field = PythonTable.class.getDeclaredField("ds");
      field.setAccessible(true);
      return field;
    } catch (NoSuchFieldException e) {
      throw new IllegalStateException(
          "lance_spark companion: this Spark has no PythonTable.ds; the companion supports "
              + "Spark 4.3",
          e);
    }
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    return new LanceScanBuilder(dataSource, python.name(), python.schema(), options);
  }
}
