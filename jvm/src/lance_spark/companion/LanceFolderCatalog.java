package lance_spark.companion;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.spark.sql.catalyst.analysis.NoSuchNamespaceException;
import org.apache.spark.sql.catalyst.analysis.NoSuchTableException;
import org.apache.spark.sql.catalyst.analysis.TableAlreadyExistsException;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.NamespaceChange;
import org.apache.spark.sql.connector.catalog.SupportsNamespaces;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCatalog;
import org.apache.spark.sql.connector.catalog.TableCatalogCapability;
import org.apache.spark.sql.connector.catalog.TableChange;
import org.apache.spark.sql.connector.catalog.TableInfo;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;


/**
 * A catalog over a folder of Lance tables, no metastore:
 * {@code spark.sql.catalog.<name>=lance_spark.companion.LanceFolderCatalog} with
 * {@code spark.sql.catalog.<name>.root=<folder or object-store URI>} (and
 * {@code spark.sql.catalog.<name>.storage.<key>} object-store settings). Table {@code t} of
 * namespace {@code a.b} is the Lance table at {@code <root>/a/b/t.lance}, LanceDB's layout: a
 * LanceDB database opens as a Spark catalog, and a table created here opens in
 * {@code lancedb.connect(root)}. The folder is the catalog: no second copy of any metadata.
 * Names are checked in Python ({@code folder_catalog.check_name}): a name that is empty,
 * {@code .} or {@code ..}, or holds a path separator or a scheme, is refused, so no statement
 * reaches a folder outside the root; this class sends identifiers, never paths.
 *
 * <p>Spark interfaces: {@code TableCatalog}, {@code SupportsNamespaces} (public DSv2). Its tables
 * are {@link LanceSessionCatalog}'s (reads, writes, versions); listing, creating and dropping
 * run in Python ({@code lance_spark.table.folder_catalog}) through the companion's planner call.
 */
public class LanceFolderCatalog implements TableCatalog, SupportsNamespaces {
  static final String ROOT = "root";

  private String name;
  private String root;
  private final Map<String, String> storage = new HashMap<>();

  /**
   * Column DEFAULT values: Spark refuses them in a catalog that does not declare them; the
   * Lance table keeps them (field metadata), as in the session catalog.
   */
  @Override
  public Set<TableCatalogCapability> capabilities() {
    return Set.of(TableCatalogCapability.SUPPORT_COLUMN_DEFAULT_VALUE);
  }

  @Override
  public void initialize(String name, CaseInsensitiveStringMap options) {
    this.name = name;
    String given = options.get(ROOT);
    if (given == null || given.isBlank()) {
      throw new IllegalArgumentException(
          "the Lance folder catalog " + name + " needs spark.sql.catalog." + name + "." + ROOT
              + ": the folder (or object-store URI) that holds its tables");
    }
    root = given.endsWith("/") ? given.substring(0, given.length() - 1) : given;
    options.asCaseSensitiveMap().forEach((key, value) -> {
      if (key.toLowerCase(Locale.ROOT).startsWith(LanceSessionCatalog.STORAGE_PREFIX)) {
        storage.put(key, value);
      }
    });
  }

  @Override
  public String name() {
    return name;
  }

  private JsonNode python(String operation, ObjectNode args) {
    Map<String, String> options = new HashMap<>(storage);
    options.put(LanceWriteTable.PATH, root);
    // The catalog's name: Python names its confs when it refuses one (a secret).
    args.put("catalog", name);
    return LanceProcedures.run(options, "catalog." + operation, args);
  }

  /** The request naming table {@code ident}: Python checks its names and makes its path. */
  private static ObjectNode identArgs(Identifier ident) {
    ObjectNode args = LancePlanner.JSON.createObjectNode().put("name", ident.name());
    args.set("namespace", parts(ident.namespace()));
    return args;
  }

  /** The table's location when a Lance table is there, else null. */
  private String existing(Identifier ident) {
    JsonNode reply = python("table_exists", identArgs(ident));
    return reply.get("exists").asBoolean() ? reply.get("location").asText() : null;
  }

  private Table load(Identifier ident, String versionKey, String versionValue)
      throws NoSuchTableException {
    String location = existing(ident);
    if (location == null) {
      throw new NoSuchTableException(ident);
    }
    Map<String, String> properties = new HashMap<>(LanceSessionCatalog.pathProperties(location));
    return LanceSessionCatalog.lanceTable(PythonTableView.FORMAT,
        name + "." + ident, location, storage, properties, versionKey, versionValue, null);
  }

  @Override
  public Table loadTable(Identifier ident) throws NoSuchTableException {
    return LanceSessionCatalog.withEvolution(load(ident, null, null));
  }

  @Override
  public Table loadTable(Identifier ident, String version) throws NoSuchTableException {
    return load(ident, LanceSessionCatalog.VERSION_AS_OF, version);
  }

  @Override
  public Table loadTable(Identifier ident, long timestampMicros) throws NoSuchTableException {
    return load(
        ident, LanceSessionCatalog.TIMESTAMP_AS_OF, LanceSessionCatalog.isoInstant(timestampMicros));
  }

  private static ArrayNode parts(String[] namespace) {
    ArrayNode out = LancePlanner.JSON.createArrayNode();
    for (String part : namespace) {
      out.add(part);
    }
    return out;
  }

  private List<String> names(String operation, String[] namespace) {
    ObjectNode args = LancePlanner.JSON.createObjectNode();
    args.set("namespace", parts(namespace));
    List<String> out = new ArrayList<>();
    python(operation, args).get("names").forEach(n -> out.add(n.asText()));
    return out;
  }

  @Override
  public Identifier[] listTables(String[] namespace) throws NoSuchNamespaceException {
    if (!namespaceExists(namespace)) {
      throw new NoSuchNamespaceException(namespace);
    }
    return names("list_tables", namespace).stream()
        .map(n -> Identifier.of(namespace, n))
        .toArray(Identifier[]::new);
  }

  @Override
  public Table createTable(Identifier ident, TableInfo info)
      throws TableAlreadyExistsException, NoSuchNamespaceException {
    if (info.partitions().length > 0) {
      throw new IllegalArgumentException(
          "Lance tables are not partitioned (" + ident + "): a scalar index makes filters on a "
              + "column fast");
    }
    if (existing(ident) != null) {
      throw new TableAlreadyExistsException(ident);
    }
    ObjectNode args = identArgs(ident);
    // Spark's schema of the columns: with their comments and default values (field metadata
    // CURRENT_DEFAULT / EXISTS_DEFAULT), which Python keeps with the Lance table.
    args.put("schema", info.schema().json());
    python("create_table", args);
    try {
      return loadTable(ident);
    } catch (NoSuchTableException e) {
      throw new IllegalStateException("the Lance table " + ident + " was created and cannot "
          + "be found", e);
    }
  }

  /**
   * {@code ALTER TABLE}: the changes are made to the Lance table (Python), as the session
   * catalog's; a folder catalog keeps nothing else.
   */
  @Override
  public Table alterTable(Identifier ident, TableChange... changes) throws NoSuchTableException {
    if (existing(ident) == null) {
      throw new NoSuchTableException(ident);
    }
    if (load(ident, null, null) instanceof LanceCatalogTable table) {
      Table deferred = LanceSessionCatalog.deferEvolution(table, changes);
      if (deferred != null) {
        return deferred;  // MERGE WITH SCHEMA EVOLUTION: committed with the MERGE
      }
    }
    ObjectNode args = identArgs(ident);
    args.set("changes", LanceSessionCatalog.changesJson(changes));
    python("alter_table", args);
    return loadTable(ident);
  }

  @Override
  public boolean dropTable(Identifier ident) {
    return python("drop_table", identArgs(ident)).get("dropped").asBoolean();
  }

  @Override
  public void renameTable(Identifier oldIdent, Identifier newIdent) {
    throw new UnsupportedOperationException(
        "RENAME TO on the Lance folder catalog " + name + ": a table's name is its folder's");
  }

  @Override
  public String[][] listNamespaces() {
    return names("list_namespaces", new String[0]).stream()
        .map(n -> new String[] {n})
        .toArray(String[][]::new);
  }

  @Override
  public String[][] listNamespaces(String[] namespace) throws NoSuchNamespaceException {
    if (!namespaceExists(namespace)) {
      throw new NoSuchNamespaceException(namespace);
    }
    return names("list_namespaces", namespace).stream()
        .map(n -> {
          String[] child = java.util.Arrays.copyOf(namespace, namespace.length + 1);
          child[namespace.length] = n;
          return child;
        })
        .toArray(String[][]::new);
  }

  @Override
  public boolean namespaceExists(String[] namespace) {
    if (namespace.length == 0) {
      return true;
    }
    ObjectNode args = LancePlanner.JSON.createObjectNode();
    args.set("namespace", parts(namespace));
    return python("namespace_exists", args).get("exists").asBoolean();
  }

  @Override
  public Map<String, String> loadNamespaceMetadata(String[] namespace)
      throws NoSuchNamespaceException {
    if (!namespaceExists(namespace)) {
      throw new NoSuchNamespaceException(namespace);
    }
    return Map.of();
  }

  @Override
  public void createNamespace(String[] namespace, Map<String, String> metadata) {
    ObjectNode args = LancePlanner.JSON.createObjectNode();
    args.set("namespace", parts(namespace));
    python("create_namespace", args);
  }

  @Override
  public void alterNamespace(String[] namespace, NamespaceChange... changes) {
    throw new UnsupportedOperationException(
        "the Lance folder catalog " + name + " keeps no namespace properties");
  }

  @Override
  public boolean dropNamespace(String[] namespace, boolean cascade) {
    throw new UnsupportedOperationException(
        "DROP NAMESPACE on the Lance folder catalog " + name + ": remove the folder");
  }

  @Override
  public String toString() {
    return "LanceFolderCatalog(" + name + ", " + root + ")";
  }

}
