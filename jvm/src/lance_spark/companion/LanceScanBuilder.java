package lance_spark.companion;

import java.util.ArrayList;
import java.util.List;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.spark.api.python.PythonFunction;
import org.apache.spark.sql.connector.expressions.aggregate.AggregateFunc;
import org.apache.spark.sql.connector.expressions.aggregate.Aggregation;
import org.apache.spark.sql.connector.expressions.aggregate.CountStar;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.SupportsPushDownAggregates;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownLimit;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceCreationResult;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

import scala.Option;

/**
 * The scan builder of one read of a {@code lance} table. Everything it learns (filters, columns,
 * LIMIT, COUNT) stays on this object and the {@link Scan} it builds, never on the
 * {@code PythonDataSourceV2} that every scan of a DataFrame shares (SPARK-58551).
 *
 * <p>Python is called twice at most: when Spark pushes filters (to learn which ones Lance
 * evaluates exactly; the answer includes the read of every column with them) and in
 * {@link #build} (to plan the read with everything else that was pushed), unless the first
 * answer is the scan.
 *
 * <p>Spark internals: {@code PythonDataSourceV2.getOrCreateDataSourceInPython} and
 * {@code source().createPythonFunction} (the pickled Python data source instance);
 * {@code SQLConf.pythonFilterPushDown}.
 */
final class LanceScanBuilder
    implements SupportsPushDownFilters,
        SupportsPushDownRequiredColumns,
        SupportsPushDownLimit,
        SupportsPushDownAggregates {
  /** Lance's metadata columns, the Python reader's {@code metadata_columns} option's names. */
  static final List<String> METADATA_COLUMNS = List.of(
      "_rowid", "_rowaddr", "_fragid", "_row_created_at_version", "_row_last_updated_at_version");
  private static final String METADATA_OPTION = "metadata_columns";

  private final PythonDataSourceV2 dataSource;
  private final String shortName;
  private final StructType schema;
  private final CaseInsensitiveStringMap options;

  private Filter[] pushed = new Filter[0];
  // The filters phase's read of every column with the pushed filters: the scan when Spark
  // then prunes no column and pushes no LIMIT or COUNT.
  private LancePlanner.Result filtered;
  private StructType required;
  private Integer limit;
  private int counts; // COUNT(*) columns of a completely pushed aggregate, 0 when none
  // A MERGE WITH SCHEMA EVOLUTION's new columns (not in the Lance table yet): read as nulls.
  private StructType added = new StructType();

  LanceScanBuilder(
      PythonDataSourceV2 dataSource,
      String shortName,
      StructType schema,
      CaseInsensitiveStringMap options) {
    this.dataSource = dataSource;
    this.shortName = shortName;
    this.schema = schema;
    this.options = options;
    this.required = schema;
  }

  /** This builder, for a table with the new columns {@code columns} (see
   * {@link LanceCatalogTable#withAddedColumns}). */
  LanceScanBuilder withAddedColumns(StructType columns) {
    added = columns;
    return this;
  }

  @Override
  public Filter[] pushFilters(Filter[] given) {
    if (given.length == 0 || !SQLConf.get().pythonFilterPushDown()) {
      return given;
    }
    // A condition on a metadata column stays Spark's (evaluated on the rows the scan gives).
    List<Filter> rejected = new ArrayList<>();
    List<Filter> candidates = new ArrayList<>();
    for (Filter filter : given) {
      boolean onMetadata = java.util.Arrays.stream(filter.references())
          .anyMatch(name -> METADATA_COLUMNS.contains(name) && !hasField(schema, name)
              || hasField(added, name));
      (onMetadata ? rejected : candidates).add(filter);
    }
    if (candidates.isEmpty()) {
      return given;
    }
    Filter[] filters = candidates.toArray(new Filter[0]);
    LancePlanner.Result result = plan(filters, request());
    filtered = result;
    boolean[] flags = result.pushed(filters.length);
    List<Filter> accepted = new ArrayList<>();
    for (int i = 0; i < filters.length; i++) {
      (flags[i] ? accepted : rejected).add(filters[i]);
    }
    pushed = accepted.toArray(new Filter[0]);
    return rejected.toArray(new Filter[0]);
  }

  /**
   * {@code filters} (an overwrite's condition: {@code writeTo(t).overwrite(cond)},
   * {@code INSERT INTO t REPLACE WHERE cond}) as one Lance predicate, translated by Python
   * exactly as a scan's pushed filters are; the replaceWhere of the write.
   */
  String overwritePredicate(Filter[] filters, String table) {
    Filter[] refused = pushFilters(filters);
    if (refused.length > 0 || filtered == null) {
      throw new IllegalArgumentException(
          "an overwrite of the Lance table " + table + " with the condition "
              + java.util.Arrays.toString(filters) + ": Lance cannot evaluate "
              + java.util.Arrays.toString(refused) + " exactly; use a condition on the "
              + "table's columns with comparisons, IN, IS NULL, AND / OR / NOT");
    }
    return filtered.reply().get("pushed_predicate").asText();
  }

  @Override
  public Filter[] pushedFilters() {
    return pushed.clone();
  }

  @Override
  public void pruneColumns(StructType requiredSchema) {
    // Arrow cannot carry rows without columns from the Python worker (its output is one struct
    // column whose length is the row count), so a scan that needs no column reads the
    // narrowest one; Spark drops it above the scan.
    required = requiredSchema.isEmpty() ? narrowest() : requiredSchema;
  }

  private StructType narrowest() {
    StructField best = null;
    for (StructField field : schema.fields()) {
      if (best == null || field.dataType().defaultSize() < best.dataType().defaultSize()) {
        best = field;
      }
    }
    return best == null ? schema : new StructType(new StructField[] {best});
  }

  @Override
  public boolean pushLimit(int n) {
    // Spark pushes a LIMIT only when no filter is left above the scan, i.e. every filter was
    // pushed and Lance evaluates it exactly.
    limit = n;
    return true;
  }

  @Override
  public boolean isPartiallyPushed() {
    // Each task stops after n rows, but several tasks may run: Spark applies the LIMIT again.
    return true;
  }

  @Override
  public boolean pushAggregation(Aggregation aggregation) {
    counts = isCountStar(aggregation) ? aggregation.aggregateExpressions().length : 0;
    return counts > 0;
  }

  @Override
  public boolean supportCompletePushDown(Aggregation aggregation) {
    return isCountStar(aggregation);
  }

  private static boolean isCountStar(Aggregation aggregation) {
    if (aggregation.groupByExpressions().length != 0) {
      return false;
    }
    AggregateFunc[] functions = aggregation.aggregateExpressions();
    if (functions.length == 0) {
      return false;
    }
    for (AggregateFunc function : functions) {
      if (!(function instanceof CountStar)) {
        return false;
      }
    }
    return true;
  }

  @Override
  public Scan build() {
    boolean[] absent = new boolean[required.length()];
    List<StructField> read = new ArrayList<>();
    for (int i = 0; i < absent.length; i++) {
      StructField field = required.fields()[i];
      absent[i] = hasField(added, field.name()) && !hasField(schema, field.name());
      if (!absent[i]) {
        read.add(field);
      }
    }
    if (read.size() == absent.length) {
      return buildRead();
    }
    // New columns of a MERGE WITH SCHEMA EVOLUTION: Python reads the others.
    StructType wanted = required;
    required = read.isEmpty() ? narrowest() : new StructType(read.toArray(new StructField[0]));
    StructType pythonRead = required;
    try {
      Scan scan = buildRead();
      if (!(scan instanceof LanceScan lance)) {
        throw new IllegalStateException(
            "lance_spark companion: a count of a table with new columns was planned as a read");
      }
      return new LanceScan(wanted, lance).withAbsentColumns(pythonRead, absent);
    } finally {
      required = wanted;
    }
  }

  private Scan buildRead() {
    if (counts == 0 && limit == null && filtered != null && required.equals(schema)) {
      return new LanceScan(
          required, filtered.spark().readInfo(), filtered.reply(), dataSource.source(), -1);
    }
    ObjectNode request = request();
    if (counts > 0) {
      request.put("aggregate", "count");
    } else {
      request.put("read_schema", required.json());
      if (limit != null) {
        request.put("limit", limit);
      }
    }
    LancePlanner.Result result = plan(pushed, request);
    for (boolean flag : result.pushed(pushed.length)) {
      if (!flag) {
        throw new IllegalStateException(
            "lance_spark companion: a filter Lance accepted when Spark pushed it was refused "
                + "when the scan was planned");
      }
    }
    JsonNode reply = result.reply();
    if (counts > 0) {
      return new LanceCountScan(reply, counts);
    }
    return new LanceScan(
        required,
        result.spark().readInfo(),
        reply,
        dataSource.source(),
        limit == null ? -1 : limit);
  }

  private ObjectNode request() {
    ObjectNode request = LancePlanner.JSON.createObjectNode();
    request.put("protocol", LanceExtensions.PROTOCOL);
    return request;
  }

  private LancePlanner.Result plan(Filter[] filters, ObjectNode request) {
    // Metadata columns Spark asks for (a catalog table's, SupportsMetadataColumns): the
    // Python reader reads them when its options name them, after the table's columns.
    StructType readable = schema;
    CaseInsensitiveStringMap readOptions = options;
    List<String> metadata = new ArrayList<>();
    for (StructField field : required.fields()) {
      if (METADATA_COLUMNS.contains(field.name()) && !hasField(schema, field.name())) {
        metadata.add(field.name());
        readable = readable.add(field.name(), org.apache.spark.sql.types.DataTypes.LongType, false);
      }
    }
    if (!metadata.isEmpty()) {
      java.util.Map<String, String> withMetadata = new java.util.HashMap<>(
          options.asCaseSensitiveMap());
      withMetadata.put(METADATA_OPTION, String.join(",", metadata));
      readOptions = new CaseInsensitiveStringMap(withMetadata);
    }
    PythonDataSourceCreationResult created =
        dataSource.getOrCreateDataSourceInPython(shortName, readOptions, Option.apply(readable));
    PythonFunction python = dataSource.source().createPythonFunction(created.dataSource());
    return new LancePlanner(python, readable, filters, request).run();
  }

  private static boolean hasField(StructType type, String name) {
    for (String existing : type.fieldNames()) {
      if (existing.equals(name)) {
        return true;
      }
    }
    return false;
  }
}
