package lance_spark.companion;

import java.util.HashMap;
import java.util.Map;

import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.execution.datasources.v2.python.PythonTable;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A Lance table as {@link LanceSessionCatalog} serves it: Spark's Python table of the
 * {@code lance} source, whose location, version and branch come from the catalog. Every scan
 * gets the catalog's options ({@code path}, storage options, {@code versionAsOf} /
 * {@code timestampAsOf}, {@code branch}) under the query's own; every write goes to the
 * location and branch ({@link LanceWriteTable#served}).
 *
 * <p>Spark interfaces: {@code SupportsRead}, {@code SupportsWrite} (public DSv2).
 *
 * <p>Its scans are Spark's own Python scans (which stream) until {@link LanceScanRule} gives a
 * batch read {@link #withCompanionScan}; {@link LanceWriteRule} leaves it alone (it is not a
 * {@code PythonTable}): it builds the companion's write itself.
 *
 * <p>Spark internals: {@code PythonTable}, {@code PythonDataSourceV2} (as {@link LanceScanTable}).
 */
final class LanceCatalogTable extends PythonTableView implements SupportsRead, SupportsWrite {
  private final PythonDataSourceV2 dataSource;
  private final String name;
  private final CaseInsensitiveStringMap fixed;
  private final boolean pinned;
  private final Map<String, String> properties;
  // Whether scans are the companion's (LanceScanRule's copy for a batch read): a streaming
  // read never meets the optimizer's rule and keeps Spark's scan, which streams.
  private final boolean companionScan;

  LanceCatalogTable(
      PythonTable python,
      PythonDataSourceV2 dataSource,
      String name,
      CaseInsensitiveStringMap fixed,
      boolean pinned,
      Map<String, String> properties) {
    this(python, dataSource, name, fixed, pinned, properties, false);
  }

  private LanceCatalogTable(
      PythonTable python,
      PythonDataSourceV2 dataSource,
      String name,
      CaseInsensitiveStringMap fixed,
      boolean pinned,
      Map<String, String> properties,
      boolean companionScan) {
    super(python);
    this.dataSource = dataSource;
    this.name = name;
    this.fixed = fixed;
    this.pinned = pinned;
    this.properties = properties;
    this.companionScan = companionScan;
  }

  /** This table, read by the companion's scan (what {@link LanceScanRule} gives batch reads). */
  LanceCatalogTable withCompanionScan() {
    return new LanceCatalogTable(python, dataSource, name, fixed, pinned, properties, true);
  }

  /**
   * The catalog entry's table properties ({@code provider}, {@code location},
   * {@code external}, {@code option.*}, as {@code V1Table.properties}: what
   * {@code DESCRIBE TABLE EXTENDED} and {@code SHOW CREATE TABLE} show); a path identifier's
   * are the provider and the location.
   */
  @Override
  public Map<String, String> properties() {
    return properties;
  }

  private static boolean companionEnabled() {
    return Boolean.parseBoolean(SQLConf.get().getConfString(LanceScanRule.ENABLED_CONF, "true"));
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    Map<String, String> merged = new HashMap<>(fixed.asCaseSensitiveMap());
    merged.putAll(options.asCaseSensitiveMap());
    CaseInsensitiveStringMap scanOptions = new CaseInsensitiveStringMap(merged);
    if (!companionScan) {
      return python.newScanBuilder(scanOptions);
    }
    return new LanceScanBuilder(dataSource, python.name(), python.schema(), scanOptions);
  }

  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    return newWriteBuilder(info, Map.of());
  }

  /** A write with {@code extra} options besides the catalog's (a staged create's OPTIONS). */
  WriteBuilder newWriteBuilder(LogicalWriteInfo info, Map<String, String> extra) {
    if (pinned) {
      throw new UnsupportedOperationException(
          "a write into an old version of the Lance table " + name + ": write into the table "
              + "without VERSION AS OF / TIMESTAMP AS OF");
    }
    Map<String, String> options = new HashMap<>(extra);
    options.putAll(writeOptions());
    return LanceWriteTable.served(python, name, options, companionEnabled())
        .newWriteBuilder(info);
  }

  /**
   * The catalog's options a write takes: the location, the branch and the object-store
   * settings ({@code storage.*}); the entry's read options ({@code OPTIONS (batch_size ...)})
   * stay with reads, where the Python source accepts them.
   */
  Map<String, String> writeOptions() {
    Map<String, String> options = new HashMap<>();
    fixed.asCaseSensitiveMap().forEach((key, value) -> {
      String lower = key.toLowerCase(java.util.Locale.ROOT);
      if (lower.equals(LanceWriteTable.PATH) || lower.equals(LanceSessionCatalog.BRANCH)
          || lower.startsWith(LanceSessionCatalog.STORAGE_PREFIX)) {
        options.put(key, value);
      }
    });
    return options;
  }

  @Override
  public String toString() {
    return "LanceCatalogTable(" + name + ", " + fixed.asCaseSensitiveMap() + ")";
  }
}
