package lance_spark.companion;

import java.io.IOException;
import java.io.InterruptedIOException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import java.util.NoSuchElementException;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.TimeUnit;

import org.apache.spark.TaskContext;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.JoinedRow;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.DeltaWriter;
import org.apache.spark.sql.connector.write.DeltaWriterFactory;
import org.apache.spark.sql.connector.write.WriterCommitMessage;

/**
 * The writer of one task of a row-level operation ({@link LanceRowLevelOperation}): Spark calls
 * {@code delete}, {@code update} and {@code insert} per row; each becomes a change row (the
 * operation's code, the row address, the row id, then the row's values) of Spark's Python
 * writer of the {@code lance} source, which streams them to Python's {@code RowLevelWriter}.
 *
 * <p>Why a thread: Spark's Python writer ({@code PythonBatchWriterFactory}'s) takes a task's
 * rows as one iterator ({@code writeAll}; its {@code write(row)} refuses), while Spark hands a
 * {@code DeltaWriter} one row per call. The Python writer runs on a thread of its own with the
 * task's {@code TaskContext}, pulling the rows this writer pushes through a small bounded queue
 * (chunks of {@link #CHUNK} copied rows): memory stays flat in the task's size. It can go when
 * Spark's Python data sources support row-level operations.
 *
 * <p>Spark interfaces: {@code DeltaWriterFactory}, {@code DeltaWriter} (public DSv2). Spark
 * internals: {@code TaskContext.withTaskContext} (the task's context on the writer's thread),
 * {@code JoinedRow}, {@code GenericInternalRow}.
 */
final class LanceDeltaWriter implements DeltaWriter<InternalRow> {
  // Operation codes of a change row (lance_spark/source/row_level.py DELTA_KINDS).
  static final int DELETE = 1;
  static final int UPDATE = 2;
  static final int INSERT = 3;
  static final int CHUNK = 1024;
  private static final int QUEUED_CHUNKS = 4;
  private static final List<InternalRow> END = Collections.emptyList();
  private static final List<InternalRow> ABORT = Collections.unmodifiableList(new ArrayList<>());

  /** Shipped to the tasks (Spark serializes it with Java serialization). */
  static final class Factory implements DeltaWriterFactory {
    private static final long serialVersionUID = 1L;
    private final DataWriterFactory python;
    private final int width;
    private final int rowId;

    Factory(DataWriterFactory python, int width, int rowId) {
      this.python = python;
      this.width = width;
      this.rowId = rowId;
    }

    @Override
    public DeltaWriter<InternalRow> createWriter(int partitionId, long taskId) {
      return new LanceDeltaWriter(python.createWriter(partitionId, taskId), width, rowId);
    }
  }

  private final DataWriter<InternalRow> python;
  private final InternalRow nothing; // the values of a deleted row: all null
  private final int rowId; // the row id's place in Spark's metadata row
  private final BlockingQueue<List<InternalRow>> queue = new ArrayBlockingQueue<>(QUEUED_CHUNKS);
  private List<InternalRow> chunk = new ArrayList<>(CHUNK);
  private Thread feeder;
  private volatile Throwable failure;

  private LanceDeltaWriter(DataWriter<InternalRow> python, int width, int rowId) {
    this.python = python;
    this.nothing = new GenericInternalRow(width);
    this.rowId = rowId;
  }

  @Override
  public void delete(InternalRow metadata, InternalRow id) throws IOException {
    add(DELETE, id.getLong(0), metadata.getLong(rowId), nothing);
  }

  @Override
  public void update(InternalRow metadata, InternalRow id, InternalRow row) throws IOException {
    add(UPDATE, id.getLong(0), metadata.getLong(rowId), row);
  }

  @Override
  public void reinsert(InternalRow metadata, InternalRow row) throws IOException {
    insert(row);
  }

  @Override
  public void insert(InternalRow row) throws IOException {
    add(INSERT, null, null, row);
  }

  private void add(int operation, Long address, Long id, InternalRow row) throws IOException {
    InternalRow head = new GenericInternalRow(new Object[] {operation, address, id});
    // Spark reuses the rows it hands out: keep a copy.
    chunk.add(new JoinedRow(head, row.copy()));
    if (chunk.size() >= CHUNK) {
      push(chunk);
      chunk = new ArrayList<>(CHUNK);
    }
  }

  private void push(List<InternalRow> rows) throws IOException {
    if (feeder == null) {
      start();
    }
    try {
      while (!queue.offer(rows, 100, TimeUnit.MILLISECONDS)) {
        if (!feeder.isAlive()) {
          throw failed();
        }
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new InterruptedIOException("the task was interrupted");
    }
  }

  private void start() {
    TaskContext task = TaskContext.get();
    Iterator<InternalRow> rows = new Pulled();
    feeder = new Thread(() -> {
      try {
        TaskContext.withTaskContext(task, () -> {
          try {
            python.writeAll(rows);
          } catch (IOException e) {
            throw new java.io.UncheckedIOException(e);
          }
          return null;
        });
      } catch (java.io.UncheckedIOException e) {
        failure = e.getCause();
      } catch (Throwable t) {
        failure = t;
      }
    }, "lance_spark row-level writer " + (task == null ? "" : task.partitionId()));
    feeder.setDaemon(true);
    feeder.start();
  }

  private IOException failed() {
    Throwable cause = failure;
    if (cause instanceof RuntimeException runtime) {
      throw runtime;
    }
    return cause instanceof IOException io
        ? io
        : new IOException("the Lance writer of the change rows failed", cause);
  }

  @Override
  public WriterCommitMessage commit() throws IOException {
    if (feeder == null) {
      python.writeAll(chunk.iterator()); // fewer rows than one chunk: no thread
    } else {
      if (!chunk.isEmpty()) {
        push(chunk);
      }
      push(END);
      join();
      if (failure != null) {
        throw failed();
      }
    }
    return python.commit();
  }

  @Override
  public void abort() throws IOException {
    stop();
    python.abort();
  }

  @Override
  public void close() throws IOException {
    stop();
    python.close();
  }

  /** Ends the Python writer's stream with an error, if it still runs. */
  private void stop() {
    if (feeder != null && feeder.isAlive()) {
      queue.clear();
      queue.offer(ABORT);
      join();
    }
  }

  private void join() {
    try {
      feeder.join();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  @Override
  public CustomTaskMetric[] currentMetricsValues() {
    return python.currentMetricsValues();
  }

  /** The pushed rows, as the Python writer's thread pulls them. */
  private final class Pulled implements Iterator<InternalRow> {
    private Iterator<InternalRow> current = Collections.emptyIterator();
    private boolean ended;

    @Override
    public boolean hasNext() {
      while (!ended && !current.hasNext()) {
        List<InternalRow> next;
        try {
          next = queue.take();
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          throw new IllegalStateException("the row-level write was interrupted", e);
        }
        if (next == ABORT) {
          throw new IllegalStateException("the row-level write was aborted");
        }
        ended = next == END;
        current = next.iterator();
      }
      return !ended;
    }

    @Override
    public InternalRow next() {
      if (!hasNext()) {
        throw new NoSuchElementException();
      }
      return current.next();
    }
  }
}
