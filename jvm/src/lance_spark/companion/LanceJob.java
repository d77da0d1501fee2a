package lance_spark.companion;

import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Set;

import com.fasterxml.jackson.databind.JsonNode;

import org.apache.spark.api.python.PythonFunction;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation$;
import org.apache.spark.sql.execution.datasources.v2.python.UserDefinedPythonDataSource;
import org.apache.spark.sql.execution.python.UserDefinedPythonFunction;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The Spark job a procedure of {@link LanceProcedures} asks for, one of two kinds. A read of one
 * binary column whose partitions are the job's tasks, planned in Python
 * ({@code lance_spark.table.job_runner.TaskReader}) and run as a {@link LanceScan}. Or a Python function
 * run on every partition of data Spark reads itself ({@code input}: format, path, options; a
 * {@code mapInArrow} of the pickled function, as {@code lance_spark.table.job_runner.run_tasks} runs
 * it from PySpark): CONVERT TO LANCE reads Parquet with Spark's reader, UPDATE COLUMNS a join
 * Python wrote as a query. Either way each task's
 * rows are what it did, which go back to Python. Java decides nothing: the tasks, the data,
 * the function and what they return are Python's.
 *
 * <p>Spark interfaces: {@code SupportsRead} (public DSv2; the table of the job's one scan).
 *
 * <p>Spark internals: {@code DataSourceV2Relation.create} and the classic {@code Dataset.ofRows}
 * (a plan of a {@code Table} no catalog names: there is no public way to read one); the classic
 * {@code Dataset.mapInArrow(Column, ...)} with a {@code UserDefinedPythonFunction} of eval type
 * {@code SQL_MAP_ARROW_ITER_UDF} (what PySpark's {@code mapInArrow} calls: no public Java API
 * runs a Python function), its {@code PythonFunction} made by
 * {@code UserDefinedPythonDataSource.createPythonFunction} (the {@code lance} source's Python).
 */
final class LanceJob implements SupportsRead {
  private final LanceScan scan;

  private LanceJob(LanceScan scan) {
    this.scan = scan;
  }

  /** Runs the job of {@code planned} (a procedure's answer); each task's result, in order. */
  static List<byte[]> run(LancePlanner.Result planned, UserDefinedPythonDataSource source) {
    StructType schema =
        (StructType) DataType.fromJson(planned.reply().get("job").get("schema").asText());
    LanceScan scan = new LanceScan(schema, planned.spark().readInfo(), planned.reply(), source, -1);
    org.apache.spark.sql.classic.SparkSession session = LancePlanner.session();
    DataSourceV2Relation relation = DataSourceV2Relation$.MODULE$.create(
        new LanceJob(scan), Option.empty(), Option.empty(), CaseInsensitiveStringMap.empty(),
        Option.empty());
    List<byte[]> results = new ArrayList<>();
    for (Row row : org.apache.spark.sql.classic.Dataset$.MODULE$.ofRows(session, relation)
        .collectAsList()) {
      results.add((byte[]) row.get(0));
    }
    return results;
  }

  /** PySpark's {@code PythonEvalType.SQL_MAP_ARROW_ITER_UDF}: a {@code mapInArrow} function. */
  private static final int MAP_ARROW_ITER = 207;

  /**
   * The data a job reads: {@code {"format", "path", "options"}}, read by Spark's reader, or
   * {@code {"query"}}, a query Python wrote over the session's tables (UPDATE COLUMNS: the
   * Lance table at the version it read, joined with the source the statement names).
   */
  static org.apache.spark.sql.classic.Dataset<Row> input(JsonNode input) {
    if (input.has("query")) {
      return LancePlanner.session().sql(input.get("query").asText());
    }
    org.apache.spark.sql.classic.DataFrameReader reader =
        LancePlanner.session().read().format(input.get("format").asText());
    for (var option : input.get("options").properties()) {
      reader.option(option.getKey(), option.getValue().asText());
    }
    return reader.load(input.get("path").asText());
  }

  /**
   * Runs the pickled Python function {@code command} (base64) on every partition of
   * {@code frame}; each result row's one binary value, in order. {@code schema}: the rows'.
   */
  static List<byte[]> map(
      org.apache.spark.sql.classic.Dataset<Row> frame,
      String command,
      StructType schema,
      UserDefinedPythonDataSource source) {
    PythonFunction function = source.createPythonFunction(Base64.getDecoder().decode(command));
    UserDefinedPythonFunction udf = new UserDefinedPythonFunction(
        "lance_spark_job", function, schema, MAP_ARROW_ITER, true,
        UserDefinedPythonFunction.$lessinit$greater$default$6(),
        UserDefinedPythonFunction.$lessinit$greater$default$7());
    List<Column> columns = new ArrayList<>();
    for (String name : frame.columns()) {
      columns.add(frame.col("`" + name.replace("`", "``") + "`"));
    }
    Column call = udf.apply(CollectionConverters.asScala(columns).toSeq());
    List<byte[]> results = new ArrayList<>();
    for (Row row : frame.mapInArrow(call, false, null).collectAsList()) {
      results.add((byte[]) row.get(0));
    }
    return results;
  }

  @Override
  public String name() {
    return "lance_spark job";
  }

  @Override
  @SuppressWarnings("deprecation")
  public StructType schema() {
    return scan.readSchema();
  }

  @Override
  public Set<TableCapability> capabilities() {
    return Set.of(TableCapability.BATCH_READ);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    return () -> scan;
  }
}
