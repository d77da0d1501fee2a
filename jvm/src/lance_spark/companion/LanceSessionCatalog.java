package lance_spark.companion;

import java.net.URI;
import java.time.Instant;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Locale;
import java.util.stream.Collectors;
import java.util.Map;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.analysis.NoSuchNamespaceException;
import org.apache.spark.sql.catalyst.analysis.NoSuchTableException;
import org.apache.spark.sql.catalyst.catalog.CatalogTable;
import org.apache.spark.sql.connector.catalog.DelegatingCatalogExtension;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.ProcedureCatalog;
import org.apache.spark.sql.connector.catalog.procedures.UnboundProcedure;
import org.apache.spark.sql.catalyst.parser.CatalystSqlParser$;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCatalog;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.catalog.V1Table;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.execution.datasources.DataSource$;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.execution.datasources.v2.python.PythonTable;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

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
public class LanceSessionCatalog extends DelegatingCatalogExtension implements ProcedureCatalog {
  /** The namespace of path identifiers: {@code lance.`/path/to/t.lance`}. */
  static final String PATH_NAMESPACE = "lance";

  /** A branch as a table: {@code t.branch_<name>} (Iceberg's spelling). */
  static final String BRANCH_PREFIX = "branch_";

  // Options of the Python source (lance_spark.source.options).
  static final String VERSION_AS_OF = "versionAsOf";
  static final String TIMESTAMP_AS_OF = "timestampAsOf";
  static final String BRANCH = "branch";
  static final String STORAGE_PREFIX = "storage.";

  @Override
  public Table loadTable(Identifier ident) throws NoSuchTableException {
    return load(ident, null, null);
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

  /**
   * The options of the Lance table {@code table} names (a table name, {@code t.branch_b} or
   * {@code lance.`path`}, as SQL text) for procedure {@code procedure}: its location, branch
   * and storage options.
   */
  Map<String, String> procedureTarget(String table, String procedure) {
    String[] parts = CollectionConverters.asJava(
        CatalystSqlParser$.MODULE$.parseMultipartIdentifier(table)).toArray(new String[0]);
    String[] namespace = Arrays.copyOf(parts, parts.length - 1);
    if (namespace.length == 0) {
      namespace = new String[] {SparkSession.active().catalog().currentDatabase()};
    }
    Table loaded;
    try {
      loaded = loadTable(Identifier.of(namespace, parts[parts.length - 1]));
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
      return lanceTable(ident.toString(), ident.name(), Map.of(),
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
      return lanceTable(ident.toString(), baseName, Map.of(BRANCH, branch),
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
    return lanceTable(name, location(entry.location()), options, v1.properties(), versionKey,
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
   * absolute path or a URI) when {@code spark.sql.runSQLOnFiles} is on.
   */
  static boolean isPathIdentifier(String[] namespace, String name) {
    if (namespace.length != 1 || !PATH_NAMESPACE.equalsIgnoreCase(namespace[0])) {
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
      schema = provider().inferSchema(fixed);
    } catch (Exception e) {  // Python's error: an AnalysisException, which Scala throws undeclared
      if (entrySchema == null) {
        throw LanceSessionCatalog.<RuntimeException>rethrow(e);
      }
      schema = entrySchema;
    }
    PythonDataSourceV2 source = provider();
    PythonTable python = (PythonTable) source.getTable(schema, new Transform[0], all);
    return new LanceCatalogTable(python, source, name, fixed, versionKey != null, properties);
  }

  static PythonDataSourceV2 provider() {
    Option<TableProvider> found =
        DataSource$.MODULE$.lookupDataSourceV2(PythonTableView.FORMAT, SQLConf.get());
    if (found.isDefined() && found.get() instanceof PythonDataSourceV2 python) {
      return python;
    }
    throw new IllegalStateException(
        "lance_spark companion: the Python data source 'lance' is not registered in this "
            + "session (is lance_spark installed for the Python of the driver?)");
  }
}
