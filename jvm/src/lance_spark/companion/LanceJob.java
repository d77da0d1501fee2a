package lance_spark.companion;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation$;
import org.apache.spark.sql.execution.datasources.v2.python.UserDefinedPythonDataSource;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

import scala.Option;

/**
 * The Spark job a procedure of {@link LanceProcedures} asks for: a read of one binary column
 * whose partitions are the job's tasks, planned in Python ({@code lance_spark.table.jobs.TaskReader})
 * and run as a {@link LanceScan}; each task's row is what it did, which goes back to Python.
 * Java decides nothing: the tasks, their number and what they return are Python's.
 *
 * <p>Spark interfaces: {@code SupportsRead} (public DSv2; the table of the job's one scan).
 *
 * <p>Spark internals: {@code DataSourceV2Relation.create} and the classic {@code Dataset.ofRows}
 * (a plan of a {@code Table} no catalog names: there is no public way to read one).
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
    org.apache.spark.sql.classic.SparkSession session =
        (org.apache.spark.sql.classic.SparkSession) org.apache.spark.sql.SparkSession.active();
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
