package lance_spark.companion;

import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.Arrays;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;

import net.razorvine.pickle.Pickler;

import org.apache.spark.api.python.PythonFunction;
import org.apache.spark.api.python.PythonWorkerUtils$;
import org.apache.spark.sql.execution.datasources.v2.python.PythonFilterPushdownResult;
import org.apache.spark.sql.execution.datasources.v2.python.UserDefinedPythonDataSourceFilterPushdownRunner;
import org.apache.spark.sql.execution.python.PythonPlannerRunner;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.StructType;

import scala.collection.immutable.Map;
import scala.jdk.javaapi.CollectionConverters;

/**
 * One planning call to the Python side of a scan ({@code lance_spark.source.scan_planner}, run
 * through the worker module {@code pyspark_lance}).
 *
 * <p>What goes to Python is exactly what Spark's filter push-down runner sends (the pickled data
 * source, the table schema, the filters, the Arrow batch size) followed by one JSON request;
 * what comes back is what that runner reads (the read function, the partitions, the pushed
 * filters) followed by one JSON reply. Spark's runner writes and reads its part, so filters and
 * their literals are serialized exactly as Spark does.
 *
 * <p>Spark internals: {@code PythonPlannerRunner} (a driver-side Python worker per call, through
 * Spark's daemon, which runs only worker modules whose name starts with {@code pyspark}) and
 * {@code UserDefinedPythonDataSourceFilterPushdownRunner}'s {@code writeToPython} /
 * {@code receiveFromPython} (the wire format of {@code data_source_pushdown_filters.py}).
 */
final class LancePlanner extends PythonPlannerRunner<LancePlanner.Result> {
  static final ObjectMapper JSON = new ObjectMapper();

  /** The active session, as the classic session the companion runs in (the server's). */
  static org.apache.spark.sql.classic.SparkSession session() {
    return (org.apache.spark.sql.classic.SparkSession) org.apache.spark.sql.SparkSession.active();
  }
  private static final String WORKER_MODULE = "pyspark_lance";

  /** What a planning call gives back. */
  record Result(PythonFilterPushdownResult spark, JsonNode reply) {
    boolean[] pushed(int count) {
      boolean[] flags = new boolean[count];
      var seq = spark.isFilterPushed();
      for (int i = 0; i < count; i++) {
        flags[i] = (Boolean) seq.apply(i);
      }
      return flags;
    }
  }

  private final UserDefinedPythonDataSourceFilterPushdownRunner spark;
  private final String request;

  LancePlanner(PythonFunction dataSource, StructType schema, Filter[] filters, ObjectNode request) {
    super(dataSource);
    this.spark = new UserDefinedPythonDataSourceFilterPushdownRunner(
        dataSource, schema, CollectionConverters.asScala(Arrays.asList(filters)).toSeq());
    this.request = request.toString();
  }

  Result run() {
    return runInPython(runInPython$default$1());
  }

  @Override
  public String workerModule() {
    return WORKER_MODULE;
  }

  @Override
  public Map<String, String> runnerConf() {
    return spark.runnerConf();
  }

  @Override
  public void writeToPython(DataOutputStream out, Pickler pickler) {
    spark.writeToPython(out, pickler);
    PythonWorkerUtils$.MODULE$.writeUTF(request, out);
  }

  @Override
  public Result receiveFromPython(DataInputStream in) {
    PythonFilterPushdownResult result = spark.receiveFromPython(in);
    String reply = PythonWorkerUtils$.MODULE$.readUTF(in);
    try {
      return new Result(result, JSON.readTree(reply));
    } catch (IOException e) {
      throw new UncheckedIOException("lance_spark companion: bad reply from Python: " + reply, e);
    }
  }
}
