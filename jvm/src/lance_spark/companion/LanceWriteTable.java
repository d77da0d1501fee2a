package lance_spark.companion;

import java.util.Map;
import java.util.Set;

import org.apache.spark.TaskContext;
import org.apache.spark.sql.connector.catalog.Column;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.SupportsTruncate;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.WriteSummary;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.connector.write.streaming.StreamingDataWriterFactory;
import org.apache.spark.sql.connector.write.streaming.StreamingWrite;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.execution.datasources.v2.python.PythonTable;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.MapType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * A {@code lance} Python table as a write sees it: every call goes to Spark's own Python write
 * ({@code PythonTable.newWriteBuilder}: the same Python {@code LanceWriter}, the same commit and
 * abort), except that each write task first lifts Spark's per-batch byte limit for itself.
 *
 * <p>Why: Spark 4.3 feeds a Python writer through {@code BatchedPythonArrowInput.writeSizedBatch},
 * which asks {@code ArrowWriter.sizeInBytes()} after every row whenever
 * {@code spark.sql.execution.arrow.maxBytesPerBatch} is not {@code Int.MaxValue} (its default is
 * 64 MiB). On a struct of three columns that check is about two thirds of the JVM time of the
 * whole write (JFR; BENCHMARKS.md, "where the write time goes"). The task reads the conf from its
 * local properties ({@code SQLConf.get} is a {@code ReadOnlySQLConf} of them on executors), so
 * setting it there changes this task only. Batches are then bounded by
 * {@code spark.sql.execution.arrow.maxRecordsPerBatch} rows (10,000 by default). Not lifted: when
 * the session sets the conf itself (its value is in the local properties, and wins), and when
 * the written rows have a binary column (images, documents: rows too large for 10,000 of them to
 * be a sensible batch). This can go when Spark checks the size once per batch, not per row.
 *
 * <p>Spark internals: {@code PythonTable} (its write builder), the executor's
 * {@code TaskContext.getLocalProperties} as the source of {@code SQLConf.get},
 * {@code BasicPythonArrowInput} reading {@code arrowMaxBytesPerBatch} when the task's Python
 * runner is made (after {@code DataWriterFactory.createWriter}).
 */
final class LanceWriteTable implements Table, SupportsWrite {
  static final String MAX_BYTES_PER_BATCH = "spark.sql.execution.arrow.maxBytesPerBatch";
  static final String NO_BYTE_LIMIT = Integer.toString(Integer.MAX_VALUE);

  private final PythonTable python;

  private LanceWriteTable(PythonTable python) {
    this.python = python;
  }

  /** The table to write {@code table} with, or null when it is not a {@code lance} Python table. */
  static LanceWriteTable wrap(Table table) {
    if (!(table instanceof PythonTable python) || !LanceScanTable.isLance(python.name())) {
      return null;
    }
    return new LanceWriteTable(python);
  }

  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    return new Builder(python.newWriteBuilder(info), !hasBinary(info.schema()));
  }

  static boolean hasBinary(DataType type) {
    if (type instanceof BinaryType) {
      return true;
    }
    if (type instanceof StructType struct) {
      for (StructField field : struct.fields()) {
        if (hasBinary(field.dataType())) {
          return true;
        }
      }
      return false;
    }
    if (type instanceof ArrayType array) {
      return hasBinary(array.elementType());
    }
    if (type instanceof MapType map) {
      return hasBinary(map.keyType()) || hasBinary(map.valueType());
    }
    return false;
  }

  /** In a write task, before Spark makes its Python runner: see the class comment. */
  static void liftByteLimit() {
    TaskContext task = TaskContext.get();
    if (task != null && task.getLocalProperty(MAX_BYTES_PER_BATCH) == null) {
      task.getLocalProperties().setProperty(MAX_BYTES_PER_BATCH, NO_BYTE_LIMIT);
    }
  }

  @Override
  public String name() {
    return python.name();
  }

  @Override
  @SuppressWarnings("deprecation")
  public StructType schema() {
    return python.schema();
  }

  @Override
  public Column[] columns() {
    return python.columns();
  }

  @Override
  public Transform[] partitioning() {
    return python.partitioning();
  }

  @Override
  public Map<String, String> properties() {
    return python.properties();
  }

  @Override
  public Set<TableCapability> capabilities() {
    return python.capabilities();
  }

  private static final class Builder implements WriteBuilder, SupportsTruncate {
    private WriteBuilder delegate;
    private final boolean lift;

    Builder(WriteBuilder delegate, boolean lift) {
      this.delegate = delegate;
      this.lift = lift;
    }

    @Override
    public WriteBuilder truncate() {
      delegate = ((SupportsTruncate) delegate).truncate();
      return this;
    }

    @Override
    public Write build() {
      return new LanceWrite(delegate.build(), lift);
    }
  }

  private static final class LanceWrite implements Write {
    private final Write delegate;
    private final boolean lift;

    LanceWrite(Write delegate, boolean lift) {
      this.delegate = delegate;
      this.lift = lift;
    }

    @Override
    public String description() {
      return delegate.description();
    }

    @Override
    public BatchWrite toBatch() {
      return new Batch(delegate.toBatch(), lift);
    }

    @Override
    public StreamingWrite toStreaming() {
      return new Streaming(delegate.toStreaming(), lift);
    }

    @Override
    public CustomMetric[] supportedCustomMetrics() {
      return delegate.supportedCustomMetrics();
    }

    @Override
    public CustomTaskMetric[] reportDriverMetrics() {
      return delegate.reportDriverMetrics();
    }

    @Override
    public String toString() {
      return delegate.toString();
    }
  }

  private static final class Batch implements BatchWrite {
    private final BatchWrite delegate;
    private final boolean lift;

    Batch(BatchWrite delegate, boolean lift) {
      this.delegate = delegate;
      this.lift = lift;
    }

    @Override
    public DataWriterFactory createBatchWriterFactory(PhysicalWriteInfo info) {
      DataWriterFactory factory = delegate.createBatchWriterFactory(info);
      return lift ? new BatchFactory(factory) : factory;
    }

    @Override
    public boolean useCommitCoordinator() {
      return delegate.useCommitCoordinator();
    }

    @Override
    public void onDataWriterCommit(WriterCommitMessage message) {
      delegate.onDataWriterCommit(message);
    }

    @Override
    public void commit(WriterCommitMessage[] messages) {
      delegate.commit(messages);
    }

    @Override
    public void commit(WriterCommitMessage[] messages, WriteSummary summary) {
      delegate.commit(messages, summary);
    }

    @Override
    public void abort(WriterCommitMessage[] messages) {
      delegate.abort(messages);
    }
  }

  private static final class Streaming implements StreamingWrite {
    private final StreamingWrite delegate;
    private final boolean lift;

    Streaming(StreamingWrite delegate, boolean lift) {
      this.delegate = delegate;
      this.lift = lift;
    }

    @Override
    public StreamingDataWriterFactory createStreamingWriterFactory(PhysicalWriteInfo info) {
      StreamingDataWriterFactory factory = delegate.createStreamingWriterFactory(info);
      return lift ? new StreamingFactory(factory) : factory;
    }

    @Override
    public boolean useCommitCoordinator() {
      return delegate.useCommitCoordinator();
    }

    @Override
    public void commit(long epochId, WriterCommitMessage[] messages) {
      delegate.commit(epochId, messages);
    }

    @Override
    public void abort(long epochId, WriterCommitMessage[] messages) {
      delegate.abort(epochId, messages);
    }
  }

  /** Shipped to the tasks (Spark serializes it with Java serialization). */
  private static final class BatchFactory implements DataWriterFactory {
    private static final long serialVersionUID = 1L;
    private final DataWriterFactory delegate;

    BatchFactory(DataWriterFactory delegate) {
      this.delegate = delegate;
    }

    @Override
    public DataWriter<InternalRow> createWriter(int partitionId, long taskId) {
      liftByteLimit();
      return delegate.createWriter(partitionId, taskId);
    }
  }

  /** Shipped to the tasks (Spark serializes it with Java serialization). */
  private static final class StreamingFactory implements StreamingDataWriterFactory {
    private static final long serialVersionUID = 1L;
    private final StreamingDataWriterFactory delegate;

    StreamingFactory(StreamingDataWriterFactory delegate) {
      this.delegate = delegate;
    }

    @Override
    public DataWriter<InternalRow> createWriter(int partitionId, long taskId, long epochId) {
      liftByteLimit();
      return delegate.createWriter(partitionId, taskId, epochId);
    }
  }
}
