package lance_spark.companion;

import java.util.ArrayList;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.arrow.vector.ValueVector;
import org.apache.arrow.vector.util.TransferPair;

import org.apache.spark.TaskContext;
import org.apache.spark.api.python.ChainedPythonFunctions;
import org.apache.spark.api.python.PythonEvalType$;
import org.apache.spark.api.python.PythonFunction;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.NamedExpression$;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.execution.datasources.v2.python.PythonCustomMetric$;
import org.apache.spark.sql.execution.datasources.v2.python.PythonInputPartition;
import org.apache.spark.sql.execution.datasources.v2.python.UserDefinedPythonDataSource;
import org.apache.spark.sql.execution.datasources.v2.python.UserDefinedPythonDataSource$;
import org.apache.spark.sql.execution.metric.SQLMetric;
import org.apache.spark.sql.execution.python.ArrowPythonRunner;
import org.apache.spark.sql.execution.python.ArrowPythonRunner$;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataType$;
import org.apache.spark.sql.types.MapType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.UserDefinedType;
import org.apache.spark.sql.util.ArrowUtils$;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.execution.vectorized.ConstantColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

import scala.Option;
import scala.Tuple2;
import scala.collection.Iterator;
import scala.collection.Iterator$;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Runs the Python read function of a {@link LanceScan} partition in a Python worker and hands
 * its Arrow batches to Spark as {@code ColumnarBatch}es of {@code ArrowColumnVector}s, as Spark's
 * own Parquet reader hands its batches, instead of converting every value into rows.
 *
 * <p>Spark internals (the executor side of {@code PythonPartitionReaderFactory} and
 * {@code MapInBatchEvaluatorFactory}, minus their row conversion): {@code ArrowPythonRunner}
 * with eval type {@code SQL_MAP_ARROW_ITER_UDF}, one input row {@code struct<partition: binary>}
 * holding the pickled partition, and output batches of one struct column whose children are the
 * scan's columns; {@code PythonCustomMetric.pythonMetrics}.
 */
final class LanceReaderFactory implements PartitionReaderFactory {
  private static final long serialVersionUID = 1L;

  private final UserDefinedPythonDataSource source;
  private final byte[] readFunction;
  private final StructType schema;
  // The schema as the Python reader's Arrow batches carry it: a user-defined type (MLlib's
  // vectors) as its SQL type, which Spark's columnar rows read the UDT's values from.
  private final StructType stored;
  private final Option<String> jobArtifactUUID;
  private final Option<String> sessionUUID;
  private final long limit;
  // The columns of ``schema`` the Python reader does not read (a MERGE WITH SCHEMA EVOLUTION's
  // new columns, not yet in the table): all null.
  private final boolean[] absent;

  /** {@code limit}: the pushed LIMIT after which the Python reader stops, or -1. */
  LanceReaderFactory(
      UserDefinedPythonDataSource source,
      byte[] readFunction,
      StructType schema,
      Option<String> jobArtifactUUID,
      Option<String> sessionUUID,
      long limit) {
    this(source, readFunction, schema, schema, new boolean[schema.length()], jobArtifactUUID,
        sessionUUID, limit);
  }

  /** {@code read}: the schema the Python reader's batches have (the columns of {@code schema}
   * not {@code absent}, in order, maybe followed by others Spark does not read). */
  LanceReaderFactory(
      UserDefinedPythonDataSource source,
      byte[] readFunction,
      StructType schema,
      StructType read,
      boolean[] absent,
      Option<String> jobArtifactUUID,
      Option<String> sessionUUID,
      long limit) {
    this.source = source;
    this.readFunction = readFunction;
    this.schema = schema;
    this.absent = absent.clone();
    this.stored = (StructType) sqlTypes(read);
    this.jobArtifactUUID = jobArtifactUUID;
    this.sessionUUID = sessionUUID;
    this.limit = limit;
  }

  /** {@code type} with every user-defined type replaced by its SQL type. */
  static DataType sqlTypes(DataType type) {
    if (type instanceof UserDefinedType<?> udt) {
      return sqlTypes(udt.sqlType());
    }
    if (type instanceof StructType struct) {
      StructField[] fields = struct.fields().clone();
      for (int i = 0; i < fields.length; i++) {
        StructField f = fields[i];
        fields[i] = new StructField(f.name(), sqlTypes(f.dataType()), f.nullable(), f.metadata());
      }
      return new StructType(fields);
    }
    if (type instanceof ArrayType array) {
      return new ArrayType(sqlTypes(array.elementType()), array.containsNull());
    }
    if (type instanceof MapType map) {
      return new MapType(
          sqlTypes(map.keyType()), sqlTypes(map.valueType()), map.valueContainsNull());
    }
    return type;
  }

  @Override
  public boolean supportColumnarReads(InputPartition partition) {
    return true;
  }

  @Override
  public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
    return new BatchReader((PythonInputPartition) partition);
  }

  @Override
  public PartitionReader<InternalRow> createReader(InputPartition partition) {
    // Spark reads columnar when the scan supports it; rows only if a caller insists.
    BatchReader batches = new BatchReader((PythonInputPartition) partition);
    UnsafeProjection copy = UnsafeProjection.create(schema);
    return new PartitionReader<>() {
      private java.util.Iterator<InternalRow> rows = java.util.Collections.emptyIterator();
      private InternalRow current;

      @Override
      public boolean next() {
        while (!rows.hasNext()) {
          if (!batches.next()) {
            return false;
          }
          rows = batches.get().rowIterator();
        }
        current = copy.apply(rows.next());
        return true;
      }

      @Override
      public InternalRow get() {
        return current;
      }

      @Override
      public void close() {
        batches.close();
      }

      @Override
      public CustomTaskMetric[] currentMetricsValues() {
        return batches.currentMetricsValues();
      }
    };
  }

  /** The Arrow batches the Python worker returns for one partition. */
  private final class BatchReader implements PartitionReader<ColumnarBatch> {
    private final scala.collection.immutable.Map<String, SQLMetric> metrics =
        PythonCustomMetric$.MODULE$.pythonMetrics();
    private final Iterator<ColumnarBatch> output;
    private final boolean validate;
    private final Set<LanceColumnVector> live =
        Collections.synchronizedSet(Collections.newSetFromMap(new IdentityHashMap<>()));
    private ColumnarBatch current;
    private long rows;

    BatchReader(PythonInputPartition partition) {
      TaskContext context = TaskContext.get();
      SQLConf conf = SQLConf.get();
      validate = conf.pysparkArrowValidateSchema();
      PythonFunction function = source.createPythonFunction(readFunction);
      ChainedPythonFunctions chained =
          new ChainedPythonFunctions(
              CollectionConverters.asScala(java.util.List.of(function)).toSeq());
      Object resultId = NamedExpression$.MODULE$.newExprId().id();
      var functions =
          CollectionConverters.asScala(java.util.List.of(new Tuple2<>(chained, resultId))).toSeq();
      ArrowPythonRunner runner =
          new ArrowPythonRunner(
              functions,
              PythonEvalType$.MODULE$.SQL_MAP_ARROW_ITER_UDF(),
              new int[][] {{0}},
              new StructType().add("struct", UserDefinedPythonDataSource$.MODULE$.readInputSchema()),
              conf.sessionLocalTimeZone(),
              conf.arrowUseLargeVarTypes(),
              ArrowPythonRunner$.MODULE$.getPythonRunnerConfMap(conf),
              metrics,
              jobArtifactUUID,
              sessionUUID);
      // The read function's input: one row of struct<partition: binary>, wrapped in one more
      // struct as every map-in-Arrow input is.
      InternalRow row =
          new GenericInternalRow(
              new Object[] {new GenericInternalRow(new Object[] {partition.pickedPartition()})});
      Iterator<InternalRow> input = Iterator$.MODULE$.single(row);
      output = runner.compute(Iterator$.MODULE$.single(input), context.partitionId(), context);
      // Whatever Spark did not close (a consumer that keeps batches, a task that stops
      // early) is freed when the task ends.
      context.addTaskCompletionListener(
          (org.apache.spark.util.TaskCompletionListener) done -> closeAll());
    }

    private void closeAll() {
      List<LanceColumnVector> left;
      synchronized (live) {
        left = new ArrayList<>(live);
      }
      left.forEach(LanceColumnVector::close);
    }

    @Override
    public boolean next() {
      if (!output.hasNext()) {
        return false;
      }
      ColumnarBatch batch = output.next();
      ColumnVector struct = batch.column(0);
      if (validate && !DataType$.MODULE$.equalsIgnoreCompatibleNullability(struct.dataType(), stored)) {
        throw new IllegalStateException(
            "lance_spark companion: the Python reader returned "
                + struct.dataType().simpleString()
                + " for the scan schema "
                + schema.simpleString());
      }
      ArrowColumnVector columns = (ArrowColumnVector) struct;
      ColumnVector[] vectors = new ColumnVector[schema.length()];
      int child = 0;
      for (int i = 0; i < vectors.length; i++) {
        if (absent[i]) {
          ConstantColumnVector nulls =
              new ConstantColumnVector(batch.numRows(), schema.fields()[i].dataType());
          nulls.setNull();
          vectors[i] = nulls;
          continue;
        }
        TransferPair pair = columns.getChild(child++).getValueVector()
            .getTransferPair(ArrowUtils$.MODULE$.rootAllocator());
        pair.transfer();
        vectors[i] = new LanceColumnVector(pair.getTo(), live);
      }
      current = new ColumnarBatch(vectors, batch.numRows());
      rows += batch.numRows();
      if (limit >= 0 && rows >= limit) {
        // The runner gives a Python worker back for reuse only when its output was read to
        // the end; a task that stops mid-stream has its worker killed (a BrokenPipeError
        // traceback on the console) and the next task forks and imports a new one (~0.8 s).
        // After a pushed LIMIT Spark stops reading as soon as it has its rows, and the Python
        // reader stops after them: only the end of the stream is left. Read it now (the
        // current batch owns its buffers, so the runner freeing its vectors is harmless).
        while (output.hasNext()) {
          output.next();
        }
      }
      return true;
    }

    @Override
    public ColumnarBatch get() {
      return current;
    }

    @Override
    public void close() {
      // The runner releases the Arrow buffers and the Python worker when the task completes.
    }

    @Override
    public CustomTaskMetric[] currentMetricsValues() {
      Map<String, SQLMetric> byName = CollectionConverters.asJava(metrics);
      var values = new java.util.HashMap<String, Object>();
      byName.forEach((name, metric) -> values.put(name, metric.value()));
      return source.createPythonTaskMetrics(
          scala.collection.immutable.Map$.MODULE$.from(CollectionConverters.asScala(values)));
    }
  }
}
