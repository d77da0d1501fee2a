package lance_spark.companion;

import java.util.HashMap;
import java.util.Map;

import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.analysis.IndexAlreadyExistsException;
import org.apache.spark.sql.catalyst.analysis.NoSuchIndexException;
import org.apache.spark.sql.connector.catalog.MetadataColumn;
import org.apache.spark.sql.connector.catalog.SupportsMetadataColumns;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsRowLevelOperations;
import org.apache.spark.sql.connector.catalog.index.SupportsIndex;
import org.apache.spark.sql.connector.catalog.index.TableIndex;
import org.apache.spark.sql.connector.expressions.Expressions;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.RowLevelOperationBuilder;
import org.apache.spark.sql.connector.write.RowLevelOperationInfo;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.execution.datasources.v2.python.PythonTable;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

import scala.Option;

/**
 * A Lance table as {@link LanceSessionCatalog} serves it: Spark's Python table of the
 * {@code lance} source, whose location, version and branch come from the catalog. Every scan
 * gets the catalog's options ({@code path}, storage options, {@code versionAsOf} /
 * {@code timestampAsOf}, {@code branch}) under the query's own; every write goes to the
 * location and branch ({@link LanceWriteTable#served}).
 *
 * <p>Spark interfaces: {@code SupportsRead}, {@code SupportsWrite}, {@code SupportsIndex}
 * (public DSv2: Spark's {@code CREATE INDEX name ON t [USING type] (column) [OPTIONS (...)]}
 * and {@code DROP INDEX name ON t}, run by Python's {@code create_index} / {@code drop_index}
 * procedures; a Lance index covers one column), {@code SupportsMetadataColumns} (Lance's
 * {@code _rowid}, {@code _rowaddr}, {@code _fragid}, {@code _row_created_at_version} and
 * {@code _row_last_updated_at_version}, selectable by name and usable in conditions; the
 * companion's scan reads them, {@link LanceScanBuilder#METADATA_COLUMNS}),
 * {@code SupportsRowLevelOperations} (MERGE, UPDATE and DELETE planned by Spark: a
 * {@link LanceRowLevelOperation} reading the latest version, which Python names).
 *
 * <p>Its scans are Spark's own Python scans (which stream) until {@link LanceScanRule} gives a
 * batch read {@link #withCompanionScan}; {@link LanceWriteRule} leaves it alone (it is not a
 * {@code PythonTable}): it builds the companion's write itself.
 *
 * <p>Spark internals: {@code PythonTable}, {@code PythonDataSourceV2} (as {@link LanceScanTable}).
 */
final class LanceCatalogTable extends PythonTableView
    implements SupportsRead, SupportsWrite, SupportsIndex, SupportsMetadataColumns,
        SupportsRowLevelOperations {
  private final PythonDataSourceV2 dataSource;
  private final String name;
  private final CaseInsensitiveStringMap fixed;
  private final boolean pinned;
  private final Map<String, String> properties;
  private volatile Map<String, String> merged;  // properties() with Lance's, once asked
  // Whether scans are the companion's (LanceScanRule's copy for a batch read): a streaming
  // read never meets the optimizer's rule and keeps Spark's scan, which streams.
  private final boolean companionScan;
  // MERGE WITH SCHEMA EVOLUTION: the columns the statement adds, after the Lance table's (its
  // scans read them as nulls; its write commits them with the MERGE's version). Empty: none.
  private final StructType added;

  LanceCatalogTable(
      PythonTable python,
      PythonDataSourceV2 dataSource,
      String name,
      CaseInsensitiveStringMap fixed,
      boolean pinned,
      Map<String, String> properties) {
    this(python, dataSource, name, fixed, pinned, properties, false, new StructType());
  }

  private LanceCatalogTable(
      PythonTable python,
      PythonDataSourceV2 dataSource,
      String name,
      CaseInsensitiveStringMap fixed,
      boolean pinned,
      Map<String, String> properties,
      boolean companionScan,
      StructType added) {
    super(python);
    this.dataSource = dataSource;
    this.name = name;
    this.fixed = fixed;
    this.pinned = pinned;
    this.properties = properties;
    this.companionScan = companionScan;
    this.added = added;
  }

  /** This table with the columns ``columns`` of a MERGE WITH SCHEMA EVOLUTION added (see
   * {@link LanceSessionCatalog#deferEvolution}). */
  LanceCatalogTable withAddedColumns(StructType columns) {
    return new LanceCatalogTable(
        python, dataSource, name, fixed, pinned, properties, companionScan, columns);
  }

  @Override
  public StructType schema() {
    StructType schema = python.schema();
    for (StructField field : added.fields()) {
      schema = schema.add(field);
    }
    return schema;
  }

  @Override
  public org.apache.spark.sql.connector.catalog.Column[] columns() {
    org.apache.spark.sql.connector.catalog.Column[] own = python.columns();
    org.apache.spark.sql.connector.catalog.Column[] all =
        java.util.Arrays.copyOf(own, own.length + added.length());
    for (int i = 0; i < added.length(); i++) {
      StructField field = added.fields()[i];
      all[own.length + i] =
          org.apache.spark.sql.connector.catalog.Column.create(field.name(), field.dataType(), true);
    }
    return all;
  }

  /** This table, read by the companion's scan (what {@link LanceScanRule} gives batch reads). */
  LanceCatalogTable withCompanionScan() {
    return new LanceCatalogTable(python, dataSource, name, fixed, pinned, properties, true, added);
  }

  /**
   * The catalog entry's table properties ({@code provider}, {@code location},
   * {@code external}, {@code option.*}, as {@code V1Table.properties}) and, over its
   * TBLPROPERTIES, the Lance table's own (its config, read when first asked: what
   * {@code SHOW TBLPROPERTIES}, {@code DESCRIBE TABLE EXTENDED} and {@code SHOW CREATE TABLE}
   * show, also when pylance set them). Spark's reserved keys stay the entry's. A path
   * identifier's entry properties are the provider and the location.
   */
  @Override
  public Map<String, String> properties() {
    Map<String, String> known = merged;
    if (known == null) {
      known = new HashMap<>(properties);
      InternalRow[] rows = LanceProcedures.result(
          LanceProcedures.run(
              python.name(), writeOptions(), "properties", LancePlanner.JSON.createObjectNode()))
          .rows();
      for (InternalRow row : rows) {
        String key = row.getUTF8String(0).toString();
        if (!LanceSessionCatalog.RESERVED.contains(key)) {
          known.put(key, row.getUTF8String(1).toString());
        }
      }
      known = java.util.Collections.unmodifiableMap(known);
      merged = known;
    }
    return known;
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

  @Override
  public RowLevelOperationBuilder newRowLevelOperationBuilder(RowLevelOperationInfo info) {
    refuseOldVersion(info.command().toString());
    InternalRow[] rows = LanceProcedures.result(
        LanceProcedures.run(
            python.name(), writeOptions(), "pin", LancePlanner.JSON.createObjectNode())).rows();
    long version = rows[0].getLong(0);
    return () -> new LanceRowLevelOperation(this, info.command(), version);
  }

  /**
   * The companion's scan of the table at {@code version} (a row-level operation's read).
   * {@code options} are the relation's: the statement's ({@code MERGE INTO t WITH (...)}),
   * write options (userMetadata, ...) that reach the write, and the key filter
   * {@link LanceMergePruning} adds; the scan takes that filter and the object-store
   * settings.
   */
  ScanBuilder scanAt(long version, CaseInsensitiveStringMap options) {
    Map<String, String> merged = new HashMap<>(fixed.asCaseSensitiveMap());
    options.asCaseSensitiveMap().forEach((key, value) -> {
      String lower = key.toLowerCase(java.util.Locale.ROOT);
      if (lower.startsWith(LanceSessionCatalog.STORAGE_PREFIX)
          || lower.equals(LanceMergePruning.FILTER_OPTION)) {
        merged.put(key, value);
      }
    });
    merged.put(LanceSessionCatalog.VERSION_AS_OF, Long.toString(version));
    return new LanceScanBuilder(
        dataSource, python.name(), python.schema(), new CaseInsensitiveStringMap(merged))
        .withAddedColumns(added);
  }

  /** Spark's Python write of a row-level operation's change rows (see LanceWriteTable). */
  BatchWrite changeWrite(LogicalWriteInfo info, StructType schema, Map<String, String> extra) {
    Map<String, String> options = new HashMap<>(extra);
    if (!added.isEmpty()) {
      options.put(ADDED_COLUMNS_OPTION, String.join(",", added.fieldNames()));
    }
    return LanceWriteTable.served(python, name, writeOptions(), false)
        .changeWrite(info, schema, options);
  }

  // The columns a MERGE WITH SCHEMA EVOLUTION adds (lance_spark/source/options.py).
  static final String ADDED_COLUMNS_OPTION = LanceOptions.name("rowLevelAddedColumns");

  private void refuseOldVersion(String what) {
    if (pinned) {
      throw new UnsupportedOperationException(
          "a " + what + " of an old version of the Lance table " + name + ": write into the "
              + "table without VERSION AS OF / TIMESTAMP AS OF");
    }
  }

  /** A write with {@code extra} options besides the catalog's (a staged create's OPTIONS). */
  WriteBuilder newWriteBuilder(LogicalWriteInfo info, Map<String, String> extra) {
    refuseOldVersion("write");
    Map<String, String> options = new HashMap<>(extra);
    options.putAll(writeOptions());
    return LanceWriteTable.served(python, name, options, companionEnabled())
        .newWriteBuilder(info, filters -> new LanceScanBuilder(
            dataSource, python.name(), python.schema(), fixed).overwritePredicate(filters, name));
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

  /** The Python table's, overwrites by a condition (replaceWhere, see
   * {@link LanceWriteTable#newWriteBuilder(LogicalWriteInfo, java.util.function.Function)})
   * and schema evolution. */
  @Override
  public java.util.Set<org.apache.spark.sql.connector.catalog.TableCapability> capabilities() {
    java.util.Set<org.apache.spark.sql.connector.catalog.TableCapability> all =
        java.util.EnumSet.noneOf(org.apache.spark.sql.connector.catalog.TableCapability.class);
    all.addAll(python.capabilities());
    all.add(org.apache.spark.sql.connector.catalog.TableCapability.OVERWRITE_BY_FILTER);
    // MERGE WITH SCHEMA EVOLUTION: Spark adds the source's new columns with the catalog's
    // ALTER TABLE before it plans the MERGE.
    all.add(org.apache.spark.sql.connector.catalog.TableCapability.AUTOMATIC_SCHEMA_EVOLUTION);
    return all;
  }

  @Override
  public MetadataColumn[] metadataColumns() {
    return LanceScanBuilder.METADATA_COLUMNS.stream()
        .map(name -> new MetadataColumn() {
          @Override
          public String name() {
            return name;
          }

          @Override
          public org.apache.spark.sql.types.DataType dataType() {
            return org.apache.spark.sql.types.DataTypes.LongType;
          }

          @Override
          public boolean isNullable() {
            return false;
          }
        })
        .toArray(MetadataColumn[]::new);
  }

  @Override
  public void createIndex(
      String indexName,
      NamedReference[] columns,
      Map<NamedReference, Map<String, String>> columnsProperties,
      Map<String, String> properties) throws IndexAlreadyExistsException {
    if (columns.length != 1) {
      throw new IllegalArgumentException(
          "CREATE INDEX " + indexName + " ON " + name + ": a Lance index covers one column; got "
              + columns.length + " (" + java.util.Arrays.toString(columns) + ")");
    }
    Map<String, String> columnOptions = columnsProperties.get(columns[0]);
    if (columnOptions != null && !columnOptions.isEmpty()) {
      throw new IllegalArgumentException(
          "CREATE INDEX " + indexName + " ON " + name + ": options of the column "
              + columns[0] + " (" + columnOptions.keySet() + "): give the index's parameters "
              + "as the statement's OPTIONS (...)");
    }
    ObjectNode args = LancePlanner.JSON.createObjectNode();
    args.put("index", indexName);
    args.put("column", String.join(".", columns[0].fieldNames()));
    ObjectNode params = args.putObject("params");
    properties.forEach((key, value) -> {
      if (key.equals(SupportsIndex.PROP_TYPE)) {
        args.put("type", value);
      } else {
        params.put(key, value);
      }
    });
    if ("exists".equals(indexOutcome("create_index", args))) {
      throw new IndexAlreadyExistsException(indexName, name, Option.empty());
    }
  }

  /** What Python's {@code create_index} / {@code drop_index} did: done, exists or missing. */
  private String indexOutcome(String procedure, ObjectNode args) {
    InternalRow[] rows =  // create_index runs a Spark job (the index's segments)
        LanceProcedures.result(
            LanceProcedures.runJobs(python.name(), writeOptions(), procedure, args)).rows();
    return rows[0].getUTF8String(0).toString();
  }

  @Override
  public void dropIndex(String indexName) throws NoSuchIndexException {
    ObjectNode args = LancePlanner.JSON.createObjectNode();
    args.put("index", indexName);
    if ("missing".equals(indexOutcome("drop_index", args))) {
      throw new NoSuchIndexException(indexName, name, Option.empty());
    }
  }

  @Override
  public boolean indexExists(String indexName) {
    return java.util.Arrays.stream(listIndexes())
        .anyMatch(index -> index.indexName().equals(indexName));
  }

  /** Lance's indexes of the table: name, type and column (Python's {@code indexes}). */
  @Override
  public TableIndex[] listIndexes() {
    InternalRow[] rows = LanceProcedures.result(
        LanceProcedures.run(python.name(), writeOptions(), "indexes", LancePlanner.JSON.createObjectNode()))
        .rows();
    TableIndex[] indexes = new TableIndex[rows.length];
    for (int i = 0; i < rows.length; i++) {
      var columns = rows[i].getArray(1);
      NamedReference[] refs = new NamedReference[columns.numElements()];
      for (int c = 0; c < refs.length; c++) {
        refs[c] = Expressions.column(columns.getUTF8String(c).toString());
      }
      String type = rows[i].isNullAt(2) ? "" : rows[i].getUTF8String(2).toString();
      indexes[i] = new TableIndex(
          rows[i].getUTF8String(0).toString(), type, refs, Map.of(), new java.util.Properties());
    }
    return indexes;
  }

  @Override
  public String toString() {
    return "LanceCatalogTable(" + name + ", " + fixed.asCaseSensitiveMap() + ")";
  }
}
