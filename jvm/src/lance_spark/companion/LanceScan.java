package lance_spark.companion;

import java.util.Map;
import java.util.OptionalLong;
import java.util.TreeMap;

import com.fasterxml.jackson.databind.JsonNode;

import org.apache.spark.JobArtifactSet$;
import org.apache.spark.JobArtifactState;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.Statistics;
import org.apache.spark.sql.connector.read.SupportsReportStatistics;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceReadInfo;
import org.apache.spark.sql.execution.datasources.v2.python.PythonInputPartition;
import org.apache.spark.sql.execution.datasources.v2.python.UserDefinedPythonDataSource;
import org.apache.spark.sql.internal.connector.SupportsMetadata;
import org.apache.spark.sql.types.StructType;

import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * A planned read of a {@code lance} table: the read function and partitions the Python reader
 * planned for exactly this scan, its statistics (from the manifest) and a description of what
 * was pushed ({@code EXPLAIN} shows it). Its batches reach Spark as Arrow column vectors.
 *
 * <p>Spark internals: {@code PythonDataSourceReadInfo} and {@code PythonInputPartition} (the
 * pickled read function and partitions), {@code UserDefinedPythonDataSource.createPythonMetrics},
 * {@code JobArtifactSet}, {@code SupportsMetadata} (EXPLAIN FORMATTED).
 */
final class LanceScan implements Scan, Batch, SupportsReportStatistics, SupportsMetadata {

  private final StructType readSchema;
  private final PythonDataSourceReadInfo readInfo;
  private final UserDefinedPythonDataSource source;
  private final Map<String, String> metadata;
  private final OptionalLong rows;
  private final OptionalLong bytes;
  private final Option<String> jobArtifactUUID;
  private final Option<String> sessionUUID;
  private final long limit;
  // A MERGE WITH SCHEMA EVOLUTION's new columns: what the Python reader reads, and which
  // columns of readSchema it does not (null: it reads readSchema).
  private StructType read;
  private boolean[] absent;

  /** {@code limit}: the LIMIT pushed to this scan, or -1. */
  LanceScan(
      StructType readSchema,
      PythonDataSourceReadInfo readInfo,
      JsonNode reply,
      UserDefinedPythonDataSource source,
      long limit) {
    this.readSchema = readSchema;
    this.limit = limit;
    this.readInfo = readInfo;
    this.source = source;
    this.metadata = metadataOf(reply);
    this.rows = optionalLong(reply, "rows");
    this.bytes = optionalLong(reply, "bytes");
    this.jobArtifactUUID =
        JobArtifactSet$.MODULE$.getCurrentJobArtifactState().map(JobArtifactState::uuid);
    this.sessionUUID = loggingSessionUUID();
  }

  /** {@code other} with the schema {@code readSchema} (see {@link #withAbsentColumns}). */
  LanceScan(StructType readSchema, LanceScan other) {
    this.readSchema = readSchema;
    this.limit = other.limit;
    this.readInfo = other.readInfo;
    this.source = other.source;
    this.metadata = other.metadata;
    this.rows = other.rows;
    this.bytes = other.bytes;
    this.jobArtifactUUID = other.jobArtifactUUID;
    this.sessionUUID = other.sessionUUID;
  }

  /** This scan, whose Python reader reads {@code read}: {@code readSchema} without the
   * columns {@code absent} marks (read as nulls). */
  LanceScan withAbsentColumns(StructType read, boolean[] absent) {
    this.read = read;
    this.absent = absent.clone();
    return this;
  }

  static Map<String, String> metadataOf(JsonNode reply) {
    Map<String, String> metadata = new TreeMap<>();
    JsonNode node = reply.path("metadata");
    for (Map.Entry<String, JsonNode> entry : node.properties()) {
      metadata.put(entry.getKey(), entry.getValue().asText());
    }
    return metadata;
  }

  static OptionalLong optionalLong(JsonNode reply, String key) {
    JsonNode node = reply.path(key);
    return node.isIntegralNumber() ? OptionalLong.of(node.asLong()) : OptionalLong.empty();
  }

  static String describe(String kind, Map<String, String> metadata) {
    StringBuilder text = new StringBuilder(kind);
    metadata.forEach((key, value) -> text.append(' ').append(key).append('=').append(value));
    return text.toString();
  }

  // Python workers log with the session's id only when worker logging is on (as PythonBatch).
  private static Option<String> loggingSessionUUID() {
    var active = org.apache.spark.sql.SparkSession.getActiveSession();
    if (active.isDefined()
        && active.get() instanceof SparkSession session
        && session.sessionState().conf().pythonWorkerLoggingEnabled()) {
      return Option.apply(session.sessionUUID());
    }
    return Option.empty();
  }

  @Override
  public StructType readSchema() {
    return readSchema;
  }

  @Override
  public String description() {
    return describe("LanceScan", metadata);
  }

  @Override
  public scala.collection.immutable.Map<String, String> getMetaData() {
    return scala.collection.immutable.Map$.MODULE$.from(CollectionConverters.asScala(metadata));
  }

  @Override
  public Batch toBatch() {
    return this;
  }

  @Override
  public ColumnarSupportMode columnarSupportMode() {
    return ColumnarSupportMode.SUPPORTED;
  }

  @Override
  public InputPartition[] planInputPartitions() {
    var partitions = readInfo.partitions();
    InputPartition[] out = new InputPartition[partitions.size()];
    for (int i = 0; i < out.length; i++) {
      out[i] = new PythonInputPartition(i, partitions.apply(i));
    }
    return out;
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    if (absent != null) {
      return new LanceReaderFactory(source, readInfo.func(), readSchema, read, absent,
          jobArtifactUUID, sessionUUID, limit);
    }
    return new LanceReaderFactory(
        source, readInfo.func(), readSchema, jobArtifactUUID, sessionUUID, limit);
  }

  @Override
  public CustomMetric[] supportedCustomMetrics() {
    return source.createPythonMetrics();
  }

  @Override
  public Statistics estimateStatistics() {
    return new Statistics() {
      @Override
      public OptionalLong sizeInBytes() {
        return bytes;
      }

      @Override
      public OptionalLong numRows() {
        return rows;
      }
    };
  }
}
