package lance_spark.companion;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowStreamReader;
import org.apache.spark.api.python.PythonFunction;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.procedures.BoundProcedure;
import org.apache.spark.sql.connector.catalog.procedures.ProcedureParameter;
import org.apache.spark.sql.connector.catalog.procedures.UnboundProcedure;
import org.apache.spark.sql.connector.read.LocalScan;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceCreationResult;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.ArrowUtils$;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Lance's procedures in {@link LanceSessionCatalog}: {@code CALL spark_catalog.system.history |
 * restore | vacuum | detail | create_tag | drop_tag | create_branch | drop_branch | branches
 * | optimize | optimize_indices | update_columns (table => '<name or lance.`path`>', ...)}
 * and {@code convert(table => 'lance.`path`', source => '<Parquet path or table>', mode =>
 * 'error')}, which {@link LanceSqlParser} also makes of Delta's {@code DESCRIBE HISTORY},
 * {@code RESTORE}, {@code VACUUM}, {@code DESCRIBE DETAIL}, {@code OPTIMIZE},
 * {@code CONVERT TO LANCE}, of the tag and branch statements and of
 * {@code ALTER TABLE t UPDATE COLUMNS}. A call runs when Spark analyses it (a
 * command: once per statement, in every client). The index operations of
 * {@link LanceCatalogTable} ({@code SupportsIndex}) run here too.
 *
 * <p>A procedure whose work is a Spark job ({@code optimize}, {@code convert}) answers with the
 * job instead of rows: the read function and partitions of a Python reader whose partitions are
 * its tasks, as a scan's plan comes back; or data for Spark to read (files, or a query Python
 * wrote: UPDATE COLUMNS's join) and a pickled Python function to run on it (before that
 * function, the procedure may ask for the data's schema). {@link LanceJob} runs it and the procedure is called again with the
 * job's results ({@code resume}), until it answers with rows; when the job fails, it is called
 * with none (it deletes what the job staged) and the job's error is raised.
 *
 * <p>Spark interfaces: {@code UnboundProcedure}, {@code BoundProcedure} (public, Spark 4), a
 * {@code LocalScan} for the result. Java decides nothing about Lance: the catalog resolves the
 * table (location, branch, storage options), and the procedure runs in Python
 * ({@code lance_spark.table.procedures}) through the companion's planner call
 * ({@link LancePlanner}); the rows come back as one Arrow IPC stream with their Spark schema.
 *
 * <p>Spark internals: {@code PythonDataSourceV2.getOrCreateDataSourceInPython} and
 * {@code createPythonFunction} (as {@link LanceScanBuilder}), {@code ArrowUtils.rootAllocator}.
 */
final class LanceProcedures {
  /** The namespace of the procedures: {@code spark_catalog.system.<name>} (Iceberg's). */
  static final String NAMESPACE = "system";

  private LanceProcedures() {}

  private static ProcedureParameter required(String name, DataType type) {
    return ProcedureParameter.in(name, type).build();
  }

  private static ProcedureParameter optional(String name, DataType type, String defaultSql) {
    return ProcedureParameter.in(name, type).defaultValue(defaultSql).build();
  }

  private static final Map<String, ProcedureParameter[]> PARAMETERS = new LinkedHashMap<>();

  /** Procedures that make their table: it is a path ({@code lance.`path`}), not loaded. */
  private static final java.util.Set<String> CREATES_TABLE = java.util.Set.of("convert");

  static {
    PARAMETERS.put("history", new ProcedureParameter[] {
      required("table", DataTypes.StringType), optional("limit", DataTypes.IntegerType, "NULL")});
    PARAMETERS.put("restore", new ProcedureParameter[] {
      required("table", DataTypes.StringType),
      optional("version", DataTypes.LongType, "NULL"),
      optional("tag", DataTypes.StringType, "NULL"),
      optional("timestamp", DataTypes.StringType, "NULL")});
    PARAMETERS.put("vacuum", new ProcedureParameter[] {
      required("table", DataTypes.StringType),
      optional("retain_hours", DataTypes.DoubleType, "NULL"),
      optional("dry_run", DataTypes.BooleanType, "false")});
    PARAMETERS.put("detail", new ProcedureParameter[] {required("table", DataTypes.StringType)});
    PARAMETERS.put("create_tag", new ProcedureParameter[] {
      required("table", DataTypes.StringType),
      required("tag", DataTypes.StringType),
      optional("version", DataTypes.LongType, "NULL")});
    PARAMETERS.put("drop_tag", new ProcedureParameter[] {
      required("table", DataTypes.StringType), required("tag", DataTypes.StringType)});
    PARAMETERS.put("create_branch", new ProcedureParameter[] {
      required("table", DataTypes.StringType),
      required("branch", DataTypes.StringType),
      optional("version", DataTypes.LongType, "NULL"),
      optional("tag", DataTypes.StringType, "NULL"),
      optional("if_not_exists", DataTypes.BooleanType, "false")});
    PARAMETERS.put("drop_branch", new ProcedureParameter[] {
      required("table", DataTypes.StringType),
      required("branch", DataTypes.StringType),
      optional("if_exists", DataTypes.BooleanType, "false")});
    PARAMETERS.put("branches", new ProcedureParameter[] {required("table", DataTypes.StringType)});
    PARAMETERS.put("optimize", new ProcedureParameter[] {
      required("table", DataTypes.StringType),
      optional("target_rows_per_fragment", DataTypes.LongType, "NULL")});
    PARAMETERS.put("optimize_indices", new ProcedureParameter[] {
      required("table", DataTypes.StringType),
      optional("index", DataTypes.StringType, "NULL"),
      optional("retrain", DataTypes.BooleanType, "false")});
    PARAMETERS.put("update_columns", new ProcedureParameter[] {
      required("table", DataTypes.StringType),
      required("source", DataTypes.StringType),
      required("on", DataTypes.StringType),
      optional("columns", DataTypes.StringType, "NULL")});
    PARAMETERS.put("convert", new ProcedureParameter[] {
      required("table", DataTypes.StringType),
      required("source", DataTypes.StringType),
      optional("mode", DataTypes.StringType, "'error'")});
  }

  static Identifier[] list() {
    return PARAMETERS.keySet().stream()
        .map(name -> Identifier.of(new String[] {NAMESPACE}, name))
        .toArray(Identifier[]::new);
  }

  /** The procedure {@code name} of {@code catalog}, or null when it has none of that name. */
  static UnboundProcedure load(LanceSessionCatalog catalog, String name) {
    ProcedureParameter[] parameters = PARAMETERS.get(name);
    return parameters == null ? null : new Procedure(catalog, name, parameters);
  }

  private record Procedure(LanceSessionCatalog catalog, String name, ProcedureParameter[] params)
      implements UnboundProcedure, BoundProcedure {
    @Override
    public String description() {
      return "Lance's " + name + " (lance_spark)";
    }

    @Override
    public BoundProcedure bind(StructType inputType) {
      return this;
    }

    @Override
    public ProcedureParameter[] parameters() {
      return params;
    }

    @Override
    public boolean isDeterministic() {
      return false;
    }

    @Override
    public Iterator<Scan> call(InternalRow input) {
      String table = input.getUTF8String(0).toString();
      ObjectNode args = LancePlanner.JSON.createObjectNode();
      for (int i = 1; i < params.length; i++) {
        if (input.isNullAt(i)) {
          continue;
        }
        DataType type = params[i].dataType();
        String key = params[i].name();
        if (type.equals(DataTypes.IntegerType)) {
          args.put(key, input.getInt(i));
        } else if (type.equals(DataTypes.LongType)) {
          args.put(key, input.getLong(i));
        } else if (type.equals(DataTypes.DoubleType)) {
          args.put(key, input.getDouble(i));
        } else if (type.equals(DataTypes.BooleanType)) {
          args.put(key, input.getBoolean(i));
        } else {
          args.put(key, input.getUTF8String(i).toString());
        }
      }
      args.put("table", table);  // the SQL text naming it, for a procedure's job to read it
      if (!table.toLowerCase(java.util.Locale.ROOT).startsWith(PythonTableView.FORMAT + ".`")) {
        args.put("name", table);  // a catalog name (DESCRIBE DETAIL shows it), not a path
      }
      Map<String, String> options;
      if (CREATES_TABLE.contains(name)) {
        options = catalog.pathTarget(table, name);
        args.put("source", catalog.parquetSource(args.get("source").asText(), name));
      } else {
        options = catalog.procedureTarget(table, name);
      }
      JsonNode reply = runJobs(options, name, args);
      if (reply.get("arrow").asText().isEmpty()) {
        return java.util.Collections.emptyIterator();  // a procedure without a result
      }
      return List.<Scan>of(result(reply)).iterator();
    }
  }

  /** Runs procedure {@code name} in Python on the table the {@code lance} source reads with
   * {@code options}; Python's JSON reply. */
  static JsonNode run(Map<String, String> options, String name, ObjectNode args) {
    return run(PythonTableView.FORMAT, options, name, args);
  }

  /** As {@link #run}, on the table the Python source {@code format} ({@code lance} or a
   * private format of it, which carries a table's own storage options) reads with
   * {@code options}. */
  static JsonNode run(String format, Map<String, String> options, String name, ObjectNode args) {
    return call(format, options, name, args, null).reply();
  }

  /** As {@link #run}, running the Spark jobs the procedure asks for (see the class doc). */
  static JsonNode runJobs(Map<String, String> options, String name, ObjectNode args) {
    return runJobs(PythonTableView.FORMAT, options, name, args);
  }

  /** As {@link #runJobs}, with the Python source {@code format} (see {@link #run(String,
   * Map, String, ObjectNode)}). */
  static JsonNode runJobs(
      String format, Map<String, String> options, String name, ObjectNode args) {
    PythonDataSourceV2 source = LanceSessionCatalog.provider(format);
    LancePlanner.Result result = call(format, options, name, args, null);
    // The data a job reads, read once for all the calls that ask for it (its schema, its job).
    org.apache.spark.sql.classic.Dataset<org.apache.spark.sql.Row> frame = null;
    String frameOf = null;
    while (result.reply().has("job")) {
      JsonNode job = result.reply().get("job");
      ObjectNode resume = LancePlanner.JSON.createObjectNode();
      resume.set("state", job.get("state"));
      List<byte[]> done = null;
      try {
        if (job.has("input")) {
          if (!job.get("input").toString().equals(frameOf)) {
            frame = LanceJob.input(job.get("input"));
            frameOf = job.get("input").toString();
          }
          if (!job.has("map")) {  // Python asks what the data is before planning its job
            ObjectNode found = resume.putObject("input");
            found.put("schema", frame.schema().json());
            found.put("files", frame.inputFiles().length);
          } else {
            StructType schema = (StructType) DataType.fromJson(job.get("schema").asText());
            done = LanceJob.map(frame, job.get("map").asText(), schema, source.source());
          }
        } else {
          done = LanceJob.run(result, source.source());
        }
      } catch (Exception e) {  // Spark's SparkException, which Scala throws undeclared
        ObjectNode failed = LancePlanner.JSON.createObjectNode();
        failed.set("state", job.get("state"));
        failed.putNull("results");
        try {
          call(format, options, name, args, failed);
        } catch (Exception cleanup) {
          e.addSuppressed(cleanup);
        }
        throw LanceProcedures.<RuntimeException>rethrow(e);
      }
      if (done != null) {
        com.fasterxml.jackson.databind.node.ArrayNode results = resume.putArray("results");
        for (byte[] blob : done) {
          results.add(Base64.getEncoder().encodeToString(blob));
        }
      }
      result = call(format, options, name, args, resume);
    }
    return result.reply();
  }

  private static LancePlanner.Result call(String format,
      Map<String, String> options, String name, ObjectNode args, ObjectNode resume) {
    PythonDataSourceV2 source = LanceSessionCatalog.provider(format);
    org.apache.spark.sql.util.CaseInsensitiveStringMap map =
        new org.apache.spark.sql.util.CaseInsensitiveStringMap(options);
    // A (empty) schema given: the Python source is created without calling schema().
    PythonDataSourceCreationResult created =
        source.getOrCreateDataSourceInPython(format, map, Option.apply(new StructType()));
    PythonFunction python = source.source().createPythonFunction(created.dataSource());
    ObjectNode request = LancePlanner.JSON.createObjectNode();
    request.put("protocol", LanceExtensions.PROTOCOL);
    ObjectNode procedure = request.putObject("procedure");
    procedure.put("name", name);
    procedure.set("args", args);
    procedure.put("app_id", SparkSession.active().sparkContext().applicationId());
    if (resume != null) {
      procedure.set("resume", resume);
    }
    try {
      return new LancePlanner(python, new StructType(), new Filter[0], request).run();
    } catch (Exception e) {  // Spark's AnalysisException, which Scala throws undeclared
      String refused = lanceError(e);
      if (refused == null) {
        throw LanceProcedures.<RuntimeException>rethrow(e);
      }
      java.util.Map<String, String> parameters = java.util.Map.of(
          "action", "run " + name + " in the", "type", PythonTableView.FORMAT, "msg", refused);
      throw LanceProcedures.<RuntimeException>rethrow(new org.apache.spark.sql.AnalysisException(
          "PYTHON_DATA_SOURCE_ERROR",
          scala.collection.immutable.Map$.MODULE$.from(CollectionConverters.asScala(parameters)),
          Option.apply(e)));
    }
  }

  @SuppressWarnings("unchecked")
  static <E extends Exception> E rethrow(Exception e) throws E {
    throw (E) e;
  }

  private static final java.util.regex.Pattern LANCE_ERROR =
      java.util.regex.Pattern.compile("lance_spark\\.errors\\.(\\w+): ([^\\n]*)");

  /**
   * The error of lance_spark's hierarchy that Python raised ({@code "InvalidOptionError:
   * message"}), or null: another failure. Spark reports a Python failure in a planner worker
   * as the reader's ({@code PYTHON_DATA_SOURCE_ERROR: Failed to initialize Python data source
   * reader}, with the traceback); a refused statement says only what is wrong.
   */
  static String lanceError(Throwable e) {
    String found = null;
    for (Throwable t = e; t != null; t = t.getCause()) {
      java.util.regex.Matcher m = LANCE_ERROR.matcher(String.valueOf(t.getMessage()));
      while (m.find()) {
        found = m.group(1) + ": " + m.group(2);
      }
      if (found != null) {
        return found;
      }
    }
    return null;
  }

  /** The rows of Python's reply (an Arrow IPC stream, base64) as a {@code LocalScan}. */
  static LocalScan result(JsonNode reply) {
    StructType schema = (StructType) DataType.fromJson(reply.get("schema").asText());
    byte[] bytes = Base64.getDecoder().decode(reply.get("arrow").asText());
    List<InternalRow> rows = new ArrayList<>();
    try (BufferAllocator allocator = ArrowUtils$.MODULE$.rootAllocator()
            .newChildAllocator("lance_spark procedure", 0, Long.MAX_VALUE);
        ArrowStreamReader reader = new ArrowStreamReader(new ByteArrayInputStream(bytes), allocator)) {
      VectorSchemaRoot root = reader.getVectorSchemaRoot();
      while (reader.loadNextBatch()) {
        ColumnVector[] columns = root.getFieldVectors().stream()
            .map(ArrowColumnVector::new)
            .toArray(ColumnVector[]::new);
        Iterator<InternalRow> it = new ColumnarBatch(columns, root.getRowCount()).rowIterator();
        while (it.hasNext()) {
          rows.add(it.next().copy());
        }
      }
    } catch (IOException e) {
      throw new UncheckedIOException("lance_spark companion: a bad procedure result", e);
    }
    InternalRow[] all = rows.toArray(new InternalRow[0]);
    return new LocalScan() {
      @Override
      public InternalRow[] rows() {
        return all;
      }

      @Override
      public StructType readSchema() {
        return schema;
      }
    };
  }
}
