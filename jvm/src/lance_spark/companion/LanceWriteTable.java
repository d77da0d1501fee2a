package lance_spark.companion;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

import org.apache.spark.TaskContext;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.SupportsOverwrite;
import org.apache.spark.sql.connector.write.SupportsTruncate;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.WriteSummary;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.connector.write.streaming.StreamingDataWriterFactory;
import org.apache.spark.sql.connector.write.streaming.StreamingWrite;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.execution.datasources.v2.python.PythonTable;
import org.apache.spark.sql.sources.AlwaysTrue;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A {@code lance} Python table as a write sees it: every call goes to Spark's own Python write
 * ({@code PythonTable.newWriteBuilder}: the same Python {@code LanceWriter}, the same commit and
 * abort), except that each write task first sizes the Arrow batches Spark sends its Python
 * worker, from the first rows it writes ({@link SizedWriter}). A catalog table's write also
 * overwrites the rows matching a condition (public {@code SupportsOverwrite}: the condition's
 * filters made one Lance predicate by Python, the writer's {@code replaceWhere}).
 *
 * <p>Why: Spark 4.3 feeds a Python writer through {@code BatchedPythonArrowInput.writeSizedBatch},
 * which asks {@code ArrowWriter.sizeInBytes()} after every row whenever
 * {@code spark.sql.execution.arrow.maxBytesPerBatch} is not {@code Int.MaxValue} (its default is
 * 64 MiB): about two thirds of the JVM time of a write of narrow rows (JFR; BENCHMARKS.md, "Where
 * the write time goes"). And its 10,000-row batches are small for narrow rows: the per-batch
 * work in the JVM, the worker and Lance made a 5M-row write ~20% slower than 65,536-row
 * batches. The task reads both confs from its local properties ({@code SQLConf.get} is a
 * {@code ReadOnlySQLConf} of them on executors), so setting them there changes this task only.
 * This can go when Spark checks the size once per batch, not per row.
 *
 * <p>Spark internals: {@code PythonTable} (its write builder), {@code DataWriter.writeAll} of
 * {@code PythonBatchWriterFactory}'s writer making the task's Python runner (which reads
 * {@code arrowMaxRecordsPerBatch} and {@code arrowMaxBytesPerBatch} in
 * {@code BasicPythonArrowInput}), the executor's {@code TaskContext.getLocalProperties} as the
 * source of {@code SQLConf.get}, and {@code UnsafeRow.getSizeInBytes}.
 */
final class LanceWriteTable extends PythonTableView implements SupportsWrite {
  static final String MAX_BYTES_PER_BATCH = "spark.sql.execution.arrow.maxBytesPerBatch";
  static final String MAX_RECORDS_PER_BATCH = "spark.sql.execution.arrow.maxRecordsPerBatch";
  static final String NO_BYTE_LIMIT = Integer.toString(Integer.MAX_VALUE);

  static final String PATH = "path";
  static final String APP_ID = LanceOptions.name("sparkAppId");

  // The catalog table this write goes to (its identifier), or null for a write by path.
  private final String catalogTable;

  // Whether write tasks size their batches (false: the companion is switched off).
  private final boolean sized;

  // The options the catalog gives every write of its table (path, storage options, branch),
  // or null: a table the session catalog did not serve.
  private final Map<String, String> catalogOptions;

  private LanceWriteTable(
      PythonTable python, String catalogTable, Map<String, String> catalogOptions, boolean sized) {
    super(python);
    this.catalogTable = catalogTable;
    this.catalogOptions = catalogOptions;
    this.sized = sized;
  }

  /**
   * The table to write {@code python} with, as {@link LanceSessionCatalog} serves the catalog
   * table {@code name}: every write gets {@code options} (its {@code path}, storage options,
   * branch).
   */
  static LanceWriteTable served(
      PythonTable python, String name, Map<String, String> options, boolean sized) {
    return new LanceWriteTable(python, name, Map.copyOf(options), sized);
  }

  /**
   * The table to write {@code table} with, or null when it is not a {@code lance} Python table.
   * {@code catalogTable}: the identifier of the catalog table the write targets, or null;
   * {@code sized}: whether write tasks size their batches.
   */
  static LanceWriteTable wrap(Table table, String catalogTable, boolean sized) {
    PythonTable python = lanceTable(table);
    return python == null ? null : new LanceWriteTable(python, catalogTable, null, sized);
  }

  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    WriteBuilder builder = python.newWriteBuilder(targeted(info));
    return sized ? new Builder(builder) : builder;
  }

  /**
   * A write that may also overwrite the rows matching a condition ({@code SupportsOverwrite}):
   * {@code predicate} makes the condition's filters one Lance predicate, given to the Python
   * writer as its {@code replaceWhere} option (an overwrite of that slice: one Lance version,
   * every written row must match it, as Delta's replaceWhere).
   */
  WriteBuilder newWriteBuilder(
      LogicalWriteInfo info, java.util.function.Function<Filter[], String> predicate) {
    return new Overwriting(this, info, predicate);
  }

  private static final class Overwriting implements WriteBuilder, SupportsOverwrite {
    private final LanceWriteTable table;
    private final LogicalWriteInfo info;
    private final java.util.function.Function<Filter[], String> predicate;
    private WriteBuilder delegate;

    Overwriting(
        LanceWriteTable table,
        LogicalWriteInfo info,
        java.util.function.Function<Filter[], String> predicate) {
      this.table = table;
      this.info = info;
      this.predicate = predicate;
      this.delegate = table.newWriteBuilder(info);
    }

    @Override
    public WriteBuilder truncate() {
      delegate = ((SupportsTruncate) delegate).truncate();
      return this;
    }

    @Override
    public WriteBuilder overwrite(Filter[] filters) {
      if (filters.length == 0
          || java.util.Arrays.stream(filters).allMatch(f -> f instanceof AlwaysTrue)) {
        return truncate();
      }
      Map<String, String> options = new HashMap<>(info.options().asCaseSensitiveMap());
      options.put(REPLACE_WHERE, predicate.apply(filters));
      delegate = table.newWriteBuilder(withOptions(info, new CaseInsensitiveStringMap(options)));
      delegate = ((SupportsTruncate) delegate).truncate();
      return this;
    }

    @Override
    public Write build() {
      return delegate.build();
    }
  }

  /** The Python writer's option of an overwrite of the rows matching a Lance predicate. */
  static final String REPLACE_WHERE = LanceOptions.name("replaceWhere");

  /**
   * {@code info} with the options of the catalog table it writes (the {@code path} option:
   * its location): Spark 4.3 hands a Python writer neither the location nor the name of the
   * catalog table it writes, and the Python writer must never guess it from the incoming data
   * (whose columns may come from another Lance table). A catalog table that the session
   * catalog did not serve (the session's {@code spark_catalog} is not
   * {@link LanceSessionCatalog}) gets nothing: the Python writer fails, naming what it needs.
   */
  private LogicalWriteInfo targeted(LogicalWriteInfo info) {
    Map<String, String> options = new HashMap<>(info.options().asCaseSensitiveMap());
    // The application in the version's history entry: Python's workers cannot know it.
    if (!info.options().containsKey(APP_ID)) {
      options.put(APP_ID, org.apache.spark.sql.SparkSession.active().sparkContext().applicationId());
    }
    if (catalogTable == null || catalogOptions == null) {
      return withOptions(info, new CaseInsensitiveStringMap(options));
    }
    String location = catalogOptions.get(PATH);
    String given = info.options().get(PATH);
    if (given != null && !plain(given).equals(plain(location))) {
      throw new IllegalArgumentException(
          "a write into the catalog table " + catalogTable + " (at '" + location
              + "') has the option path='" + given + "': drop the path option");
    }
    options.putAll(catalogOptions);
    return withOptions(info, new CaseInsensitiveStringMap(options));
  }

  /**
   * Spark's Python write of the change rows of a row-level operation ({@link
   * LanceRowLevelOperation}): the Python writer gets {@code schema} (the delta columns, then
   * the table's) and this table's options, with {@code extra} (the operation and its version).
   */
  BatchWrite changeWrite(LogicalWriteInfo info, StructType schema, Map<String, String> extra) {
    Map<String, String> options = new HashMap<>(targeted(info).options().asCaseSensitiveMap());
    // Options are case-insensitive: an extra one replaces the statement's of any spelling.
    options.keySet().removeIf(key -> extra.keySet().stream().anyMatch(key::equalsIgnoreCase));
    options.putAll(extra);
    LogicalWriteInfo change = withOptions(info, new CaseInsensitiveStringMap(options), schema);
    return python.newWriteBuilder(change).build().toBatch();
  }

  /** {@code info} with {@code options} instead of its own. */
  private static LogicalWriteInfo withOptions(
      LogicalWriteInfo info, CaseInsensitiveStringMap options) {
    return withOptions(info, options, info.schema());
  }

  /** {@code info} with {@code options} and {@code schema} instead of its own. */
  private static LogicalWriteInfo withOptions(
      LogicalWriteInfo info, CaseInsensitiveStringMap options, StructType schema) {
    return new LogicalWriteInfo() {
      @Override
      public CaseInsensitiveStringMap options() {
        return options;
      }

      @Override
      public String queryId() {
        return info.queryId();
      }

      @Override
      public StructType schema() {
        return schema;
      }

      @Override
      public Optional<StructType> rowIdSchema() {
        return info.rowIdSchema();
      }

      @Override
      public Optional<StructType> metadataSchema() {
        return info.metadataSchema();
      }
    };
  }

  private static String plain(String uri) {
    if (uri.startsWith("file://")) {
      return uri.substring("file://".length());
    }
    return uri.startsWith("file:") ? uri.substring("file:".length()) : uri;
  }

  private static final class Builder implements WriteBuilder, SupportsTruncate {
    private WriteBuilder delegate;

    Builder(WriteBuilder delegate) {
      this.delegate = delegate;
    }

    @Override
    public WriteBuilder truncate() {
      delegate = ((SupportsTruncate) delegate).truncate();
      return this;
    }

    @Override
    public Write build() {
      return new LanceWrite(delegate.build());
    }
  }

  private static final class LanceWrite implements Write {
    private final Write delegate;

    LanceWrite(Write delegate) {
      this.delegate = delegate;
    }

    @Override
    public String description() {
      return delegate.description();
    }

    @Override
    public BatchWrite toBatch() {
      return new Batch(delegate.toBatch());
    }

    @Override
    public StreamingWrite toStreaming() {
      return new Streaming(delegate.toStreaming());
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

    Batch(BatchWrite delegate) {
      this.delegate = delegate;
    }

    @Override
    public DataWriterFactory createBatchWriterFactory(PhysicalWriteInfo info) {
      return new BatchFactory(delegate.createBatchWriterFactory(info));
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

    Streaming(StreamingWrite delegate) {
      this.delegate = delegate;
    }

    @Override
    public StreamingDataWriterFactory createStreamingWriterFactory(PhysicalWriteInfo info) {
      return new StreamingFactory(delegate.createStreamingWriterFactory(info));
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
      return new SizedWriter(delegate.createWriter(partitionId, taskId));
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
      return new SizedWriter(delegate.createWriter(partitionId, taskId, epochId));
    }
  }

  /**
   * Spark's writer of one task, fed after the batch sizes are set from the first
   * {@link #SAMPLE} rows: {@link #TARGET_BATCH_BYTES} per batch, between Spark's 10,000 rows and
   * {@link #MAX_ROWS}, and no per-row size check as long as such batches stay under Spark's
   * 64 MiB. Rows larger than that on average (images, documents) keep Spark's settings. A
   * conf the session sets itself is kept (its value is in the local properties); the other is
   * still sized, within the same 64 MiB.
   */
  static final class SizedWriter implements DataWriter<InternalRow> {
    static final int SAMPLE = 1_000;
    static final long TARGET_BATCH_BYTES = 8L << 20;
    static final long SPARK_BATCH_BYTES = 64L << 20;
    static final long MIN_ROWS = 10_000;
    static final long MAX_ROWS = 65_536;

    private final DataWriter<InternalRow> delegate;

    SizedWriter(DataWriter<InternalRow> delegate) {
      this.delegate = delegate;
    }

    @Override
    public void writeAll(Iterator<InternalRow> rows) throws IOException {
      List<InternalRow> head = new ArrayList<>();
      long bytes = 0;
      boolean sized = true;
      while (head.size() < SAMPLE && rows.hasNext()) {
        InternalRow row = rows.next();
        if (row instanceof UnsafeRow unsafe) {
          bytes += unsafe.getSizeInBytes();
        } else {
          sized = false;
        }
        head.add(row.copy()); // Spark reuses the row object it hands out
      }
      if (sized && !head.isEmpty()) {
        configure(bytes / head.size());
      }
      delegate.writeAll(new Concat(head.iterator(), rows));
    }

    /** Sets this task's batch confs for rows of {@code rowBytes} (see the class comment). */
    static void configure(long rowBytes) {
      TaskContext task = TaskContext.get();
      if (task == null) {
        return;
      }
      String ownRows = task.getLocalProperty(MAX_RECORDS_PER_BATCH);
      String ownBytes = task.getLocalProperty(MAX_BYTES_PER_BATCH);
      long width = Math.max(1, rowBytes);
      long rows = Math.max(MIN_ROWS, Math.min(MAX_ROWS, TARGET_BATCH_BYTES / width));
      if (ownRows != null) {
        try {
          rows = Long.parseLong(ownRows.trim());
        } catch (NumberFormatException e) {
          return;
        }
      }
      if (rows <= 0 || rows * width > SPARK_BATCH_BYTES) {
        return; // no row limit, or batches Spark's byte limit would cut: keep the check
      }
      if (ownRows == null) {
        task.getLocalProperties().setProperty(MAX_RECORDS_PER_BATCH, Long.toString(rows));
      }
      if (ownBytes == null) {
        task.getLocalProperties().setProperty(MAX_BYTES_PER_BATCH, NO_BYTE_LIMIT);
      }
    }

    @Override
    public void write(InternalRow row) throws IOException {
      delegate.write(row);
    }

    @Override
    public WriterCommitMessage commit() throws IOException {
      return delegate.commit();
    }

    @Override
    public void abort() throws IOException {
      delegate.abort();
    }

    @Override
    public void close() throws IOException {
      delegate.close();
    }

    @Override
    public CustomTaskMetric[] currentMetricsValues() {
      return delegate.currentMetricsValues();
    }
  }

  /** The sampled rows, then the rest. */
  private static final class Concat implements Iterator<InternalRow> {
    private final Iterator<InternalRow> first;
    private final Iterator<InternalRow> rest;

    Concat(Iterator<InternalRow> first, Iterator<InternalRow> rest) {
      this.first = first;
      this.rest = rest;
    }

    @Override
    public boolean hasNext() {
      return first.hasNext() || rest.hasNext();
    }

    @Override
    public InternalRow next() {
      return first.hasNext() ? first.next() : rest.next();
    }
  }
}
