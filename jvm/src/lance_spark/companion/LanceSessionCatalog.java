package lance_spark.companion;

import java.net.URI;
import java.time.Instant;
import java.util.Arrays;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.stream.Collectors;
import java.util.Map;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.analysis.NoSuchNamespaceException;
import org.apache.spark.sql.catalyst.analysis.NoSuchTableException;
import org.apache.spark.sql.catalyst.analysis.TableAlreadyExistsException;
import org.apache.spark.sql.catalyst.catalog.CatalogTable;
import org.apache.spark.sql.connector.catalog.Column;
import org.apache.spark.sql.connector.catalog.ColumnDefaultValue;
import org.apache.spark.sql.connector.catalog.DefaultValue;
import org.apache.spark.sql.connector.catalog.DelegatingCatalogExtension;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.ProcedureCatalog;
import org.apache.spark.sql.connector.catalog.procedures.UnboundProcedure;
import org.apache.spark.sql.catalyst.parser.CatalystSqlParser$;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.StagedTable;
import org.apache.spark.sql.connector.catalog.StagingTableCatalog;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.TableCatalog;
import org.apache.spark.sql.connector.catalog.TableChange;
import org.apache.spark.sql.connector.catalog.TableInfo;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.catalog.V1Table;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.execution.datasources.DataSource$;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.execution.datasources.v2.python.PythonTable;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Lance's tables in Spark's session catalog ({@code spark_catalog}), for every client: the
 * {@code spark-sql} CLI, the Thrift JDBC server, Spark Connect without {@code lance_spark}, a
 * SQL file given to {@code spark-submit}, PySpark. Set by {@code lance_spark.spark_conf()},
 * {@code configure(builder)} and {@code register(spark)}:
 * {@code spark.sql.catalog.spark_catalog=lance_spark.companion.LanceSessionCatalog}.
 *
 * <p>Spark interface: {@code org.apache.spark.sql.connector.catalog.DelegatingCatalogExtension}
 * (public; Spark sets its own {@code V2SessionCatalog} as the delegate, which keeps every entry
 * and every non-Lance table). It overrides the three {@code TableCatalog.loadTable} methods:
 * <ul>
 *   <li>{@code loadTable(ident)}: the delegate answers a {@code V1Table} (with a custom session
 *       catalog, {@code V2SessionCatalog} never turns a catalog entry into its provider's
 *       table); one whose {@code CatalogTable.provider} is {@code lance} becomes a
 *       {@link LanceCatalogTable} at the entry's location, with the entry's options.
 *   <li>{@code loadTable(ident, version)} / {@code loadTable(ident, timestampMicros)} ({@code
 *       VERSION AS OF}, {@code TIMESTAMP AS OF}, {@code DataFrameReader.option("versionAsOf")}
 *       on a table): the same, with the Python source's {@code versionAsOf} /
 *       {@code timestampAsOf} option, passed as Spark gives it (a version number or a tag's
 *       name: Python decides); the schema is that version's (asked from Python).
 *   <li>{@code lance.`/path`} (namespace {@code lance}, name an absolute path or a URI) when no
 *       such table exists: the Lance table at that path, as Delta's {@code DeltaCatalog}
 *       serves {@code delta.`/path`}.
 *   <li>{@code t.branch_b}, {@code db.t.branch_b}, {@code lance.`/path`.branch_b} when no such
 *       table exists: branch {@code b} of that Lance table (Iceberg's spelling), read and
 *       written.
 * </ul>
 *
 * <p>Spark interface: {@code StagingTableCatalog} (public), with {@code createTable} and
 * {@code alterTable}: the DDL of {@code USING lance} tables. The entry is the delegate's (so
 * {@code DROP TABLE} and {@code RENAME TO} are Spark's own, managed or external); the Lance
 * table at its location is created, replaced and altered in Python ({@code catalog.*}
 * operations through {@link LanceProcedures#run}, the one bridge), in the same statement.
 *
 * <p>Java decides nothing about Lance: the table's schema (of a version, a branch, a path) is
 * the Python data source's {@code schema()}, called through Spark's own runner
 * ({@code TableProvider.inferSchema} of the Python source); a version, a tag, a branch or a path
 * that Lance does not have fails there, with Python's message.
 *
 * <p>Spark internals (in the upgrade checklist, docs/project/internals.md): {@code DataSource.lookupDataSourceV2}
 * (the {@code PythonDataSourceV2} of the Python source {@code lance}, registered in every
 * session by Spark's discovery of {@code pyspark_lance}; there is no public way to get a
 * provider by name), {@code PythonDataSourceV2} / {@code PythonTable} (the table and its write
 * builder), {@code CatalogTable} (provider, location, storage properties of a {@code V1Table}).
 */
public class LanceSessionCatalog extends DelegatingCatalogExtension
    implements ProcedureCatalog, StagingTableCatalog {
  /** The namespace of path identifiers: {@code lance.`/path/to/t.lance`}. */
  static final String PATH_NAMESPACE = "lance";

  /** A branch as a table: {@code t.branch_<name>} (Iceberg's spelling). */
  static final String BRANCH_PREFIX = "branch_";

  // Options of the Python source (lance_spark.source.options).
  static final String VERSION_AS_OF = LanceOptions.name("versionAsOf");
  static final String TIMESTAMP_AS_OF = LanceOptions.name("timestampAsOf");
  static final String BRANCH = LanceOptions.name("branch");
  static final String STORAGE_PREFIX = "storage.";
  /** The write's history name (lance_spark.source.options.TABLE_OPERATIONS, Delta's names). */
  static final String TABLE_OPERATION = LanceOptions.name("tableOperation");
  static final String OVERWRITE_SCHEMA = LanceOptions.name("overwriteSchema");
  static final String CREATE_AS_SELECT = "CREATE TABLE AS SELECT";
  static final String REPLACE_AS_SELECT = "REPLACE TABLE AS SELECT";
  static final String CREATE_OR_REPLACE_AS_SELECT = "CREATE OR REPLACE TABLE AS SELECT";

  @Override
  public Table loadTable(Identifier ident) throws NoSuchTableException {
    return withEvolution(load(ident, null, null));
  }

  // MERGE WITH SCHEMA EVOLUTION: the columns Spark's analyzer asked alterTable to add, by the
  // table's location, until its next loadTable on this thread (the one it plans the MERGE on)
  // takes them. They are committed with the MERGE's own version (Python's row-level commit),
  // or not at all when the statement fails.
  private static final ThreadLocal<Map<String, StructType>> EVOLVING =
      ThreadLocal.withInitial(HashMap::new);
  // The analyzer rule of Spark's automatic schema evolution (an internal Spark class, see the
  // upgrade checklist of docs/project/internals.md): alterTable called by it adds columns
  // for the statement only.
  private static final String SCHEMA_EVOLUTION_RULE =
      "org.apache.spark.sql.catalyst.analysis.ResolveSchemaEvolution";

  static Table withEvolution(Table table) {
    if (table instanceof LanceCatalogTable lance && !EVOLVING.get().isEmpty()) {
      StructType added = EVOLVING.get().remove(lance.writeOptions().get(LanceWriteTable.PATH));
      if (added != null) {
        return lance.withAddedColumns(added);
      }
    }
    return table;
  }

  private static boolean calledBySchemaEvolution() {
    return StackWalker.getInstance().walk(frames -> frames.anyMatch(
        frame -> frame.getClassName().startsWith(SCHEMA_EVOLUTION_RULE)));
  }

  /**
   * The columns ``changes`` add, when they are all new top-level columns (Spark's automatic
   * schema evolution of a MERGE); else null.
   */
  static StructType addedColumns(TableChange... changes) {
    StructType added = new StructType();
    for (TableChange change : changes) {
      if (!(change instanceof TableChange.AddColumn add) || add.fieldNames().length != 1
          || add.position() != null) {
        return null;
      }
      added = added.add(add.fieldNames()[0], add.dataType(), true);
    }
    return added.isEmpty() ? null : added;
  }

  /**
   * {@code alterTable} called by Spark's automatic schema evolution with new columns only:
   * nothing is committed; the table Spark loads next on this thread for the statement has
   * them ({@link LanceCatalogTable#withAddedColumns}). Returns that table, or null when
   * {@code changes} are an ALTER TABLE's.
   */
  static Table deferEvolution(LanceCatalogTable table, TableChange... changes) {
    StructType added = addedColumns(changes);
    if (added == null || !calledBySchemaEvolution()) {
      return null;
    }
    EVOLVING.get().put(table.writeOptions().get(LanceWriteTable.PATH), added);
    return table.withAddedColumns(added);
  }

  @Override
  public UnboundProcedure loadProcedure(Identifier ident) {
    String[] namespace = ident.namespace();
    UnboundProcedure found = namespace.length == 1
            && LanceProcedures.NAMESPACE.equalsIgnoreCase(namespace[0])
        ? LanceProcedures.load(this, ident.name().toLowerCase(Locale.ROOT))
        : null;
    if (found == null) {
      throw new IllegalArgumentException(
          "no Lance procedure " + ident + "; procedures: "
              + Arrays.stream(LanceProcedures.list())
                  .map(p -> name() + "." + p).collect(Collectors.joining(", ")));
    }
    return found;
  }

  @Override
  public Identifier[] listProcedures(String[] namespace) {
    return namespace.length == 1 && LanceProcedures.NAMESPACE.equalsIgnoreCase(namespace[0])
        ? LanceProcedures.list()
        : new Identifier[0];
  }

  // --- DDL: CREATE, CTAS, REPLACE, ALTER of USING lance tables -------------------------------
  // The catalog entry is the delegate's (Spark's own: DROP, RENAME TO, managed or external);
  // the Lance table at its location is made and changed in Python, in the same statement.

  /**
   * {@code CREATE TABLE t (cols) USING lance [LOCATION]}: the entry, then the empty Lance table
   * at its location (a table already there with these columns is registered as it is). With no
   * columns ({@code CREATE TABLE t USING lance LOCATION} of an existing table), Spark's own:
   * the delegate asks the Python source for the schema.
   */
  @Override
  public Table createTable(Identifier ident, TableInfo info)
      throws TableAlreadyExistsException, NoSuchNamespaceException {
    if (isLance(info.properties()) && info.columns().length == 0
        && !info.properties().containsKey(TableCatalog.PROP_LOCATION)) {
      throw new IllegalArgumentException(
          "CREATE TABLE " + ident + " USING lance needs columns, AS SELECT ..., or the LOCATION "
              + "of an existing Lance table");
    }
    if (!isLance(info.properties()) || info.columns().length == 0) {
      return super.createTable(ident, info);
    }
    refusePartitions(ident, info);
    super.createTable(ident, info);
    try {
      CatalogTable entry = entry(ident);
      ObjectNode args = createArgs(info, entry);
      args.put("register", true);
      python(entry, "create_table", args);
    } catch (Exception e) {  // Python's refusal: an AnalysisException, thrown undeclared
      super.dropTable(ident);  // a managed table's new folder goes too
      throw LanceSessionCatalog.<RuntimeException>rethrow(e);
    }
    return loadOrFail(ident);
  }

  /** {@code CREATE TABLE ... AS SELECT}, {@code writeTo(t).create()}, {@code saveAsTable}. */
  @Override
  public StagedTable stageCreate(Identifier ident, TableInfo info)
      throws TableAlreadyExistsException, NoSuchNamespaceException {
    if (!isLance(info.properties())) {
      Table created = super.createTable(ident, info);
      return new LanceStagedTable(created, info.columns(), Map.of(), false, new LanceStagedTable.Stage() {
        @Override
        public void commit(boolean written) {}

        @Override
        public void abort() {
          LanceSessionCatalog.super.dropTable(ident);
        }
      });
    }
    refusePartitions(ident, info);
    String location = info.properties().get(TableCatalog.PROP_LOCATION);
    // Before anything is made: the properties are ones Lance keeps, LOCATION holds no table.
    ObjectNode check = LancePlanner.JSON.createObjectNode();
    if (location != null) {
      check.put("location", location);
    }
    check.set("properties", toJson(userProperties(info.properties())));
    python(location == null ? "" : location, storageOptions(info.properties()), "check_create",
        check);
    super.createTable(ident, info);
    try {
      CatalogTable entry = entry(ident);
      Table table = fromEntry(super.loadTable(ident), ident.toString(), null, null, null);
      return staged(ident, info, entry, table, false, CREATE_AS_SELECT,
          () -> super.dropTable(ident));
    } catch (Exception e) {
      super.dropTable(ident);
      throw LanceSessionCatalog.<RuntimeException>rethrow(e);
    }
  }

  /** {@code REPLACE TABLE}, {@code writeTo(t).replace()}. */
  @Override
  public StagedTable stageReplace(Identifier ident, TableInfo info)
      throws NoSuchNamespaceException, NoSuchTableException {
    Table existing = super.loadTable(ident);
    return replace(ident, info, existing, REPLACE_AS_SELECT);
  }

  /**
   * {@code CREATE OR REPLACE TABLE}, {@code writeTo(t).createOrReplace()},
   * {@code saveAsTable} in mode overwrite.
   */
  @Override
  public StagedTable stageCreateOrReplace(Identifier ident, TableInfo info)
      throws NoSuchNamespaceException {
    Table existing;
    try {
      existing = super.loadTable(ident);
    } catch (NoSuchTableException e) {
      existing = null;
    }
    try {
      return existing == null
          ? stageCreate(ident, info)
          : replace(ident, info, existing, CREATE_OR_REPLACE_AS_SELECT);
    } catch (TableAlreadyExistsException | NoSuchTableException e) {
      throw LanceSessionCatalog.<RuntimeException>rethrow(e);  // another session's DDL, meanwhile
    }
  }

  /**
   * A Lance table stays where it is and gets a new version with the new rows and columns; a
   * table of another provider is dropped, then created as a Lance table (Spark's own
   * non-atomic replace: the session catalog cannot hold both).
   */
  private StagedTable replace(Identifier ident, TableInfo info, Table existing, String operation)
      throws NoSuchNamespaceException, NoSuchTableException {
    if (!isLance(info.properties())) {
      throw new IllegalArgumentException(
          "REPLACE TABLE " + ident + " USING " + info.properties().get(TableCatalog.PROP_PROVIDER)
              + ": the session catalog replaces tables only USING lance (Spark's own session "
              + "catalog does not replace tables)");
    }
    if (!(existing instanceof V1Table v1) || !isLance(v1.catalogTable())) {
      super.dropTable(ident);
      try {
        return stageCreate(ident, info);
      } catch (TableAlreadyExistsException e) {
        throw LanceSessionCatalog.<RuntimeException>rethrow(e);
      }
    }
    refusePartitions(ident, info);
    CatalogTable entry = v1.catalogTable();
    String given = info.properties().get(TableCatalog.PROP_LOCATION);
    String current = location(entry.location());
    if (given != null && !location(URI.create(given.contains(":") ? given : "file:" + given))
        .equals(current)) {
      throw new IllegalArgumentException(
          "REPLACE TABLE " + ident + " LOCATION '" + given + "': the Lance table stays at '"
              + current + "'; drop the LOCATION clause, or DROP TABLE and CREATE it there");
    }
    ObjectNode check = LancePlanner.JSON.createObjectNode();
    check.set("properties", toJson(userProperties(info.properties())));
    python(entry, "check_create", check);
    Table table = fromEntry(existing, ident.toString(), null, null, null);
    return staged(ident, info, entry, table, true, operation, () -> {});
  }

  private StagedTable staged(
      Identifier ident, TableInfo info, CatalogTable entry, Table table, boolean replace,
      String operation, Runnable onAbort) {
    Map<String, String> options = new HashMap<>(writeOptions(info.properties()));
    options.put(TABLE_OPERATION, operation);
    if (replace) {
      options.put(OVERWRITE_SCHEMA, "true");
    }
    return new LanceStagedTable(table, info.columns(), options, replace, new LanceStagedTable.Stage() {
      @Override
      public void commit(boolean written) {
        ObjectNode args = createArgs(info, entry);
        if (replace && !written) {
          args.put("replace", true);  // REPLACE TABLE t (cols): empty, with the new columns
          python(entry, "create_table", args);
        } else if (!userProperties(info.properties()).isEmpty()) {
          python(entry, "set_table_properties", args);
        }
      }

      @Override
      public void abort() {
        onAbort.run();
      }
    });
  }

  /**
   * {@code ALTER TABLE} of a Lance table: the changes are made to the Lance table (Python);
   * the entry keeps the properties in step (SHOW TBLPROPERTIES shows the entry's). Columns are
   * always Lance's: the catalog asks Lance for them at every load.
   */
  @Override
  public Table alterTable(Identifier ident, TableChange... changes) throws NoSuchTableException {
    Table existing;
    try {
      existing = super.loadTable(ident);
    } catch (NoSuchTableException | RuntimeException e) {
      existing = null;  // maybe a path identifier or a branch
    }
    boolean entry = existing instanceof V1Table v1 && isLance(v1.catalogTable());
    if (existing != null && !entry) {
      return super.alterTable(ident, changes);
    }
    Table lance = entry
        ? fromEntry(existing, ident.toString(), null, null, null)
        : notInCatalog(ident, null, null);
    if (!(lance instanceof LanceCatalogTable table)) {
      throw new NoSuchTableException(ident);
    }
    Table deferred = deferEvolution(table, changes);
    if (deferred != null) {
      return deferred;
    }
    ArrayNode json = changesJson(changes);
    List<TableChange> properties = new ArrayList<>();
    for (TableChange change : changes) {
      if (change instanceof TableChange.SetProperty || change instanceof TableChange.RemoveProperty) {
        properties.add(change);
      }
    }
    Map<String, String> options = table.writeOptions();
    ObjectNode args = LancePlanner.JSON.createObjectNode();
    args.put("location", options.get(LanceWriteTable.PATH));
    if (options.containsKey(BRANCH)) {
      args.put("branch", options.get(BRANCH));
    }
    args.set("changes", json);
    LanceProcedures.run(options, "catalog.alter_table", args);
    if (entry && !properties.isEmpty()) {
      super.alterTable(ident, properties.toArray(new TableChange[0]));  // SHOW TBLPROPERTIES
    }
    return loadTable(ident);
  }

  /** Spark's table changes as Python's {@code alter_table} takes them. */
  static ArrayNode changesJson(TableChange... changes) {
    ArrayNode json = LancePlanner.JSON.createArrayNode();
    for (TableChange change : changes) {
      json.add(changeJson(change));
    }
    return json;
  }

  private static ObjectNode changeJson(TableChange change) {
    ObjectNode out = LancePlanner.JSON.createObjectNode();
    if (change instanceof TableChange.SetProperty set) {
      out.put("kind", "set_property").put("key", set.property()).put("value", set.value());
    } else if (change instanceof TableChange.RemoveProperty remove) {
      out.put("kind", "remove_property").put("key", remove.property());
    } else if (change instanceof TableChange.AddColumn add) {
      out.put("kind", "add_column").put("type", add.dataType().json())
          .put("nullable", add.isNullable()).put("comment", add.comment());
      out.set("path", toJson(add.fieldNames()));
      if (add.position() != null) {
        out.put("position", add.position().toString());
      }
      ColumnDefaultValue defaultValue = add.defaultValue();
      if (defaultValue != null) {
        // Spark's own field metadata of the default (CURRENT_DEFAULT, EXISTS_DEFAULT), as
        // TableInfo.schema() encodes a column's default, and the value of the rows already
        // there (Spark's internal form: Python converts it for the column's type).
        String[] names = add.fieldNames();
        Column column = Column.create(names[names.length - 1], add.dataType(),
            add.isNullable(), null, defaultValue, null);
        StructType encoded = new TableInfo.Builder().withColumns(new Column[] {column}).build()
            .schema();
        out.put("default_metadata", encoded.fields()[0].metadata().json());
        Object value = defaultValue.getValue().value();
        out.put("default_value", value == null ? null : value.toString());
      }
    } else if (change instanceof TableChange.RenameColumn rename) {
      out.put("kind", "rename_column").put("new", rename.newName());
      out.set("path", toJson(rename.fieldNames()));
    } else if (change instanceof TableChange.DeleteColumn delete) {
      out.put("kind", "delete_column").put("if_exists", Boolean.TRUE.equals(delete.ifExists()));
      out.set("path", toJson(delete.fieldNames()));
    } else if (change instanceof TableChange.UpdateColumnType type) {
      out.put("kind", "update_type").put("type", type.newDataType().json());
      out.set("path", toJson(type.fieldNames()));
    } else if (change instanceof TableChange.UpdateColumnComment comment) {
      out.put("kind", "update_comment").put("comment", comment.newComment());
      out.set("path", toJson(comment.fieldNames()));
    } else if (change instanceof TableChange.UpdateColumnDefaultValue update) {
      // ALTER COLUMN c SET DEFAULT expr (its SQL) / DROP DEFAULT (empty): Spark's current
      // default; the rows already there keep theirs.
      DefaultValue current = update.newCurrentDefault();
      out.put("kind", "update_default").put("default", current == null ? null : current.getSql());
      out.set("path", toJson(update.fieldNames()));
    } else if (change instanceof TableChange.UpdateColumnNullability nullability) {
      out.put("kind", "update_nullability").put("nullable", nullability.nullable());
      out.set("path", toJson(nullability.fieldNames()));
    } else {
      out.put("kind", "unsupported").put("description", change.toString());
    }
    return out;
  }

  private static ArrayNode toJson(String[] parts) {
    ArrayNode out = LancePlanner.JSON.createArrayNode();
    for (String part : parts) {
      out.add(part);
    }
    return out;
  }

  private static ObjectNode toJson(Map<String, String> map) {
    ObjectNode out = LancePlanner.JSON.createObjectNode();
    map.forEach(out::put);
    return out;
  }

  private static void refusePartitions(Identifier ident, TableInfo info) {
    if (info.partitions().length > 0) {
      throw new IllegalArgumentException(
          "Lance tables are not partitioned (" + ident + "): drop PARTITIONED BY; a scalar "
              + "index makes filters on a column fast");
    }
  }

  private CatalogTable entry(Identifier ident) {
    try {
      Table table = super.loadTable(ident);
      return ((V1Table) table).catalogTable();
    } catch (NoSuchTableException e) {
      throw new IllegalStateException("the catalog entry of " + ident + " is gone", e);
    }
  }

  private Table loadOrFail(Identifier ident) {
    try {
      return loadTable(ident);
    } catch (NoSuchTableException e) {
      throw new IllegalStateException("the catalog entry of " + ident + " is gone", e);
    }
  }

  /** The arguments of Python's create_table for {@code info} at {@code entry}'s location. */
  private static ObjectNode createArgs(TableInfo info, CatalogTable entry) {
    ObjectNode args = LancePlanner.JSON.createObjectNode();
    args.put("location", location(entry.location()));
    args.put("schema", info.schema().json());
    args.set("options", toJson(writeOptions(info.properties())));
    args.set("properties", toJson(userProperties(info.properties())));
    return args;
  }

  /** The statement's OPTIONS ({@code option.<key>} in the table's properties). */
  private static Map<String, String> writeOptions(Map<String, String> properties) {
    Map<String, String> out = new HashMap<>();
    properties.forEach((key, value) -> {
      if (key.startsWith(TableCatalog.OPTION_PREFIX)) {
        out.put(key.substring(TableCatalog.OPTION_PREFIX.length()), value);
      }
    });
    return out;
  }

  private static Map<String, String> storageOptions(Map<String, String> properties) {
    Map<String, String> out = new HashMap<>();
    writeOptions(properties).forEach((key, value) -> {
      if (key.toLowerCase(Locale.ROOT).startsWith(STORAGE_PREFIX)) {
        out.put(key, value);
      }
    });
    return out;
  }

  // Spark's reserved table properties (CatalogV2Util.TABLE_RESERVED_PROPERTIES, internal).
  static final java.util.Set<String> RESERVED = java.util.Set.of(
      TableCatalog.PROP_PROVIDER, TableCatalog.PROP_LOCATION, TableCatalog.PROP_COMMENT,
      TableCatalog.PROP_OWNER, TableCatalog.PROP_EXTERNAL, TableCatalog.PROP_IS_MANAGED_LOCATION,
      TableCatalog.PROP_COLLATION, TableCatalog.PROP_TABLE_TYPE);

  /** TBLPROPERTIES: the table's properties that are not Spark's reserved ones or OPTIONS. */
  private static Map<String, String> userProperties(Map<String, String> properties) {
    Map<String, String> out = new HashMap<>();
    properties.forEach((key, value) -> {
      // Spark gives each OPTIONS entry twice: "option.<key>", and "<key>" for V1 sources.
      if (!key.startsWith(TableCatalog.OPTION_PREFIX) && !RESERVED.contains(key)
          && !properties.containsKey(TableCatalog.OPTION_PREFIX + key)) {
        out.put(key, value);
      }
    });
    return out;
  }

  private JsonNode python(CatalogTable entry, String operation, ObjectNode args) {
    Map<String, String> storage = new HashMap<>();
    CollectionConverters.asJava(entry.storage().properties()).forEach((key, value) -> {
      if (key.toLowerCase(Locale.ROOT).startsWith(STORAGE_PREFIX)) {
        storage.put(key, value);
      }
    });
    return python(location(entry.location()), storage, operation, args);
  }

  private static JsonNode python(
      String location, Map<String, String> storage, String operation, ObjectNode args) {
    Map<String, String> options = new HashMap<>(storage);
    options.put(LanceWriteTable.PATH, location);
    return LanceProcedures.run(options, "catalog." + operation, args);
  }

  private static boolean isLance(Map<String, String> properties) {
    String provider = properties.get(TableCatalog.PROP_PROVIDER);
    return provider != null && PythonTableView.FORMAT.equalsIgnoreCase(provider);
  }

  /**
   * The options of the Lance table {@code table} names (a table name, {@code t.branch_b} or
   * {@code lance.`path`}, as SQL text) for procedure {@code procedure}: its location, branch
   * and storage options.
   */
  Map<String, String> procedureTarget(String table, String procedure) {
    Table loaded;
    try {
      loaded = loadTable(identifier(table));
    } catch (NoSuchTableException e) {
      throw LanceSessionCatalog.<RuntimeException>rethrow(e);
    }
    if (!(loaded instanceof LanceCatalogTable lance)) {
      throw new IllegalArgumentException(
          "procedure " + procedure + ": table " + table + " is not a Lance table (created "
              + "USING lance)");
    }
    return lance.writeOptions();
  }

  /** The table {@code name} (SQL text) names; a one-part name is in the current database. */
  private static Identifier identifier(String name) {
    String[] parts = CollectionConverters.asJava(
        CatalystSqlParser$.MODULE$.parseMultipartIdentifier(name)).toArray(new String[0]);
    String[] namespace = Arrays.copyOf(parts, parts.length - 1);
    if (namespace.length == 0) {
      namespace = new String[] {SparkSession.active().catalog().currentDatabase()};
    }
    return Identifier.of(namespace, parts[parts.length - 1]);
  }

  /**
   * The options of the Lance table at the path {@code table} ({@code lance.`path`}) for
   * procedure {@code procedure}, which makes it: nothing is loaded, there may be no table yet.
   */
  Map<String, String> pathTarget(String table, String procedure) {
    String[] parts = CollectionConverters.asJava(
        CatalystSqlParser$.MODULE$.parseMultipartIdentifier(table)).toArray(new String[0]);
    if (parts.length != 2 || !isPathIdentifier(new String[] {parts[0]}, parts[1])) {
      throw new IllegalArgumentException(
          "procedure " + procedure + " writes a new Lance table at a path: its table must be "
              + PATH_NAMESPACE + ".`<absolute path or URI>`, not " + table);
    }
    return Map.of(LanceWriteTable.PATH, parts[1]);
  }

  /** Whether {@code name} is a path or URI rather than a table's name. */
  static boolean isPath(String name) {
    return name.contains("/") || name.contains(":") || name.contains("\\");
  }

  /**
   * The Parquet data {@code source} names for procedure {@code procedure}: a path as it is, or
   * the location of a Parquet table of this catalog ({@code USING parquet}, or a Hive table
   * stored as Parquet).
   */
  String parquetSource(String source, String procedure) {
    if (isPath(source)) {
      return source;
    }
    Table loaded;
    try {
      loaded = super.loadTable(identifier(source));
    } catch (Exception e) {  // NoSuchTableException, or Spark's error for a bad namespace
      throw LanceSessionCatalog.<RuntimeException>rethrow(e);
    }
    if (loaded instanceof V1Table v1) {
      CatalogTable entry = v1.catalogTable();
      Option<String> provider = entry.provider();
      Option<String> serde = entry.storage().serde();
      boolean parquet = provider.isDefined() && "parquet".equalsIgnoreCase(provider.get())
          || provider.isDefined() && "hive".equalsIgnoreCase(provider.get())
              && serde.isDefined() && serde.get().toLowerCase(Locale.ROOT).contains("parquet");
      if (parquet) {
        return location(entry.location());
      }
    }
    throw new IllegalArgumentException(
        "procedure " + procedure + " reads Parquet data: " + source + " is not a Parquet table "
            + "(give a Parquet path, or a table created USING parquet)");
  }

  @Override
  public Table loadTable(Identifier ident, String version) throws NoSuchTableException {
    return load(ident, VERSION_AS_OF, version);
  }

  @Override
  public Table loadTable(Identifier ident, long timestampMicros) throws NoSuchTableException {
    return load(ident, TIMESTAMP_AS_OF, isoInstant(timestampMicros));
  }

  /** {@code micros} since the epoch as an ISO-8601 instant in UTC (what Python parses). */
  static String isoInstant(long micros) {
    long seconds = Math.floorDiv(micros, 1_000_000L);
    long nanos = Math.floorMod(micros, 1_000_000L) * 1_000L;
    return Instant.ofEpochSecond(seconds, nanos).toString();
  }

  private Table load(Identifier ident, String versionKey, String versionValue)
      throws NoSuchTableException {
    Table table;
    try {
      table = super.loadTable(ident);
    } catch (Exception e) {
      // V2SessionCatalog reports a missing database as NoSuchNamespaceException (and a name of
      // too many parts as an AnalysisException), which Scala throws undeclared.
      Table served = notInCatalog(ident, versionKey, versionValue);
      if (served != null) {
        return served;
      }
      throw LanceSessionCatalog.<RuntimeException>rethrow(e);
    }
    Table lance = fromEntry(table, ident.toString(), null, versionKey, versionValue);
    if (lance != null) {
      return lance;
    }
    if (versionKey != null) {
      // Not a Lance table: the delegate's own answer (V2SessionCatalog refuses time travel).
      return VERSION_AS_OF.equals(versionKey)
          ? super.loadTable(ident, versionValue)
          : super.loadTable(ident, parseMicros(versionValue));
    }
    return table;
  }

  /** A path identifier or a branch of a Lance table, or null: {@code ident} names neither. */
  private Table notInCatalog(Identifier ident, String versionKey, String versionValue) {
    if (isPathIdentifier(ident.namespace(), ident.name())) {
      return lanceTable(ident.namespace()[0], ident.toString(), ident.name(), Map.of(),
          pathProperties(ident.name()), versionKey, versionValue, null);
    }
    String name = ident.name();
    String[] namespace = ident.namespace();
    if (namespace.length == 0 || name.length() <= BRANCH_PREFIX.length()
        || !name.toLowerCase(Locale.ROOT).startsWith(BRANCH_PREFIX)) {
      return null;
    }
    String branch = name.substring(BRANCH_PREFIX.length());
    String[] baseNamespace = Arrays.copyOf(namespace, namespace.length - 1);
    String baseName = namespace[namespace.length - 1];
    if (baseNamespace.length == 0) {
      // t.branch_b: the table t of the current database, as a one-part name resolves.
      baseNamespace = new String[] {SparkSession.active().catalog().currentDatabase()};
    }
    if (isPathIdentifier(baseNamespace, baseName)) {
      return lanceTable(baseNamespace[0], ident.toString(), baseName, Map.of(BRANCH, branch),
          pathProperties(baseName), versionKey, versionValue, null);
    }
    Table base;
    try {
      base = super.loadTable(Identifier.of(baseNamespace, baseName));
    } catch (Exception e) {
      return null;  // no such table either: the delegate's error for the whole name
    }
    return fromEntry(base, ident.toString(), branch, versionKey, versionValue);
  }

  /** The Lance table of a catalog entry ({@code table}), or null: not a Lance table. */
  private static Table fromEntry(
      Table table, String name, String branch, String versionKey, String versionValue) {
    if (!(table instanceof V1Table v1) || !isLance(v1.catalogTable())) {
      return null;
    }
    CatalogTable entry = v1.catalogTable();
    // The entry's object-store settings (OPTIONS ('storage.<key>' = ...)); its other options
    // were the CREATE statement's (a write's), not every read's.
    Map<String, String> options = new HashMap<>();
    CollectionConverters.asJava(entry.storage().properties()).forEach((key, value) -> {
      if (key.toLowerCase(Locale.ROOT).startsWith(STORAGE_PREFIX)) {
        options.put(key, value);
      }
    });
    if (branch != null) {
      options.put(BRANCH, branch);
    }
    // The schema is Lance's (Python's), not the entry's: the table may have changed outside
    // the catalog (another writer, a RESTORE), and a branch's columns may differ.
    return lanceTable(PythonTableView.FORMAT, name, location(entry.location()), options,
        v1.properties(), versionKey,
        versionValue, branch == null && versionKey == null ? entry.schema() : null);
  }

  @SuppressWarnings("unchecked")
  private static <E extends Exception> E rethrow(Exception e) throws E {
    throw (E) e;
  }

  private static long parseMicros(String iso) {
    Instant instant = Instant.parse(iso);
    return Math.addExact(
        Math.multiplyExact(instant.getEpochSecond(), 1_000_000L), instant.getNano() / 1_000L);
  }

  private static boolean isLance(CatalogTable entry) {
    Option<String> provider = entry.provider();
    return provider.isDefined() && PythonTableView.FORMAT.equalsIgnoreCase(provider.get());
  }

  /**
   * {@code lance.`path`}: Delta's rule (the namespace is the format's name, the name an
   * absolute path or a URI) when {@code spark.sql.runSQLOnFiles} is on. The namespace may also
   * be one of lance_spark's private formats ({@code lance_storage_<n>.`path`}): the table
   * API's statements on a table with its own storage options, which travel on that format's
   * Python class, never as options (Spark shows options in plans).
   */
  static boolean isPathIdentifier(String[] namespace, String name) {
    if (namespace.length != 1 || !PythonTableView.isLanceFormat(namespace[0])) {
      return false;
    }
    if (!SQLConf.get().runSQLonFile()) {
      return false;
    }
    return name.startsWith("/") || name.contains("://") || name.startsWith("file:");
  }

  static Map<String, String> pathProperties(String path) {
    return Map.of(
        TableCatalog.PROP_PROVIDER, PythonTableView.FORMAT, TableCatalog.PROP_LOCATION, path,
        TableCatalog.PROP_EXTERNAL, "true");
  }

  /** A catalog location as the Python source takes it (a plain path for local files). */
  private static String location(URI uri) {
    if ("file".equals(uri.getScheme())) {
      return uri.getPath();
    }
    return uri.toString();
  }

  /**
   * The Lance table {@code name} at {@code path}: Spark's Python table of the {@code lance}
   * source, read with {@code path}, {@code options} (the entry's, a branch) and the version
   * option added to every scan's options, and written at {@code path}. Its schema is Python's
   * (Lance's, of that version or branch). {@code entrySchema}: the catalog entry's, for when
   * Python cannot say (no Lance table at the location yet, or any more): such an entry still
   * resolves, so that DESCRIBE, DROP and the write that creates the table work, and a read
   * fails in Python saying what is missing; null: Python's error is the load's.
   */
  static Table lanceTable(
      String format,
      String name,
      String path,
      Map<String, String> options,
      Map<String, String> properties,
      String versionKey,
      String versionValue,
      StructType entrySchema) {
    Map<String, String> all = new HashMap<>(options);
    all.put(LanceWriteTable.PATH, path);
    if (versionKey != null) {
      all.put(versionKey, versionValue);
    }
    CaseInsensitiveStringMap fixed = new CaseInsensitiveStringMap(all);
    // A provider caches the Python instance it first creates: this one is for the schema.
    StructType schema;
    try {
      schema = provider(format).inferSchema(fixed);
    } catch (Exception e) {  // Python's error: an AnalysisException, which Scala throws undeclared
      if (entrySchema == null) {
        throw LanceSessionCatalog.<RuntimeException>rethrow(e);
      }
      schema = entrySchema;
    }
    PythonDataSourceV2 source = provider(format);
    PythonTable python = (PythonTable) source.getTable(schema, new Transform[0], all);
    return new LanceCatalogTable(python, source, name, fixed, versionKey != null, properties);
  }

  static PythonDataSourceV2 provider() {
    return provider(PythonTableView.FORMAT);
  }

  /** The Python data source {@code format}: {@code lance} or a private format of it. */
  static PythonDataSourceV2 provider(String format) {
    Option<TableProvider> found = DataSource$.MODULE$.lookupDataSourceV2(format, SQLConf.get());
    if (found.isDefined() && found.get() instanceof PythonDataSourceV2 python) {
      return python;
    }
    throw new IllegalStateException(
        "lance_spark companion: the Python data source '" + format + "' is not registered in "
            + "this session (is lance_spark installed for the Python of the driver?)");
  }
}
