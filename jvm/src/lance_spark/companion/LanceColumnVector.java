package lance_spark.companion;

import java.util.Set;

import org.apache.arrow.vector.BaseFixedWidthVector;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.BitVector;
import org.apache.arrow.vector.DateDayVector;
import org.apache.arrow.vector.Float4Vector;
import org.apache.arrow.vector.Float8Vector;
import org.apache.arrow.vector.IntVector;
import org.apache.arrow.vector.SmallIntVector;
import org.apache.arrow.vector.TimeStampMicroTZVector;
import org.apache.arrow.vector.TimeStampMicroVector;
import org.apache.arrow.vector.TinyIntVector;
import org.apache.arrow.vector.ValueVector;
import org.apache.arrow.vector.VarBinaryVector;
import org.apache.arrow.vector.VarCharVector;
import org.apache.arrow.vector.complex.ListVector;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * One column of one batch of a {@link LanceScan}: an {@code ArrowColumnVector} that owns its
 * Arrow buffers and reads the common types straight from them.
 *
 * <p>Owning: the runner loads every batch into the same vectors, but Spark takes Arrow-backed
 * batches as allocated per batch (its Arrow UDF evaluation, {@code
 * ColumnarArrowEvalPythonEvaluatorFactory}, keeps the columns of earlier batches while it
 * reads the next ones). So each column's buffers are transferred (no copy) out of the runner's
 * vectors into a vector of its own, freed when Spark closes the batch ({@code
 * ColumnarToRowExec} does, after reading it) or, at the latest, when the task ends.
 *
 * <p>Reading: Spark's {@code ArrowColumnVector} reads every value through Arrow's accessors
 * (a validity lookup per value even in a column without nulls, a holder per string), which
 * profiled at 80% of the JVM's time of a full scan; Parquet's column vectors are plain arrays.
 * For booleans, integers, floats, dates, timestamps, strings, binaries and lists of them this
 * class reads the buffers by address (with no validity lookup when the column has no nulls);
 * every other type is {@code ArrowColumnVector}'s. Extending it keeps Spark's Arrow paths
 * (which test {@code instanceof ArrowColumnVector}) for these batches.
 *
 * <p>Spark internals: {@code ArrowColumnVector} (its public constructor and accessors),
 * {@code ColumnVector.closeIfFreeable}, {@code Platform}, {@code UTF8String.fromAddress}.
 */
final class LanceColumnVector extends ArrowColumnVector {
  private final Set<LanceColumnVector> live;
  private final long validity; // 0 when the column has no nulls
  private final long data; // 0 when this type is read by ArrowColumnVector's accessors
  private final long offsets; // strings, binaries and lists
  private final LanceColumnVector elements; // lists

  LanceColumnVector(ValueVector vector, Set<LanceColumnVector> live) {
    super(vector);
    this.live = live;
    if (live != null) {
      live.add(this);
    }
    boolean fixed = isFast(vector) && vector instanceof BaseFixedWidthVector;
    boolean variable = vector instanceof VarCharVector || vector instanceof VarBinaryVector;
    boolean list = vector instanceof ListVector l && isFast(l.getDataVector());
    boolean fast = (fixed || variable || list) && vector.getValueCount() > 0;
    this.validity =
        fast && vector.getNullCount() > 0 ? vector.getValidityBuffer().memoryAddress() : 0;
    this.data = fast && !list ? vector.getDataBuffer().memoryAddress() : 0;
    this.offsets = fast && (variable || list) ? vector.getOffsetBuffer().memoryAddress() : 0;
    this.elements =
        fast && list ? new LanceColumnVector(((ListVector) vector).getDataVector(), null) : null;
  }

  private static boolean isFast(ValueVector vector) {
    return vector instanceof BitVector
        || vector instanceof TinyIntVector
        || vector instanceof SmallIntVector
        || vector instanceof IntVector
        || vector instanceof BigIntVector
        || vector instanceof Float4Vector
        || vector instanceof Float8Vector
        || vector instanceof DateDayVector
        || vector instanceof TimeStampMicroTZVector
        || vector instanceof TimeStampMicroVector
        || vector instanceof VarCharVector
        || vector instanceof VarBinaryVector;
  }

  @Override
  public void close() {
    if (live == null || live.remove(this)) {
      super.close();
    }
  }

  @Override
  public boolean isNullAt(int rowId) {
    if (data == 0 && offsets == 0) {
      return super.isNullAt(rowId);
    }
    return validity != 0 && !bit(validity, rowId);
  }

  // Spark calls getBoolean only on boolean columns (a BitVector: one bit per value).
  @Override
  public boolean getBoolean(int rowId) {
    return data != 0 ? bit(data, rowId) : super.getBoolean(rowId);
  }

  @Override
  public byte getByte(int rowId) {
    return data != 0 ? Platform.getByte(null, data + rowId) : super.getByte(rowId);
  }

  @Override
  public short getShort(int rowId) {
    return data != 0 ? Platform.getShort(null, data + 2L * rowId) : super.getShort(rowId);
  }

  @Override
  public int getInt(int rowId) {
    return data != 0 ? Platform.getInt(null, data + 4L * rowId) : super.getInt(rowId);
  }

  @Override
  public long getLong(int rowId) {
    return data != 0 ? Platform.getLong(null, data + 8L * rowId) : super.getLong(rowId);
  }

  @Override
  public float getFloat(int rowId) {
    return data != 0 ? Platform.getFloat(null, data + 4L * rowId) : super.getFloat(rowId);
  }

  @Override
  public double getDouble(int rowId) {
    return data != 0 ? Platform.getDouble(null, data + 8L * rowId) : super.getDouble(rowId);
  }

  @Override
  public UTF8String getUTF8String(int rowId) {
    if (offsets == 0 || elements != null) {
      return super.getUTF8String(rowId);
    }
    if (isNullAt(rowId)) {
      return null;
    }
    int start = offset(rowId);
    return UTF8String.fromAddress(null, data + start, offset(rowId + 1) - start);
  }

  @Override
  public byte[] getBinary(int rowId) {
    if (offsets == 0 || elements != null) {
      return super.getBinary(rowId);
    }
    if (isNullAt(rowId)) {
      return null;
    }
    int start = offset(rowId);
    byte[] bytes = new byte[offset(rowId + 1) - start];
    Platform.copyMemory(null, data + start, bytes, Platform.BYTE_ARRAY_OFFSET, bytes.length);
    return bytes;
  }

  @Override
  public ColumnarArray getArray(int rowId) {
    if (elements == null) {
      return super.getArray(rowId);
    }
    if (isNullAt(rowId)) {
      return null;
    }
    int start = offset(rowId);
    return new ColumnarArray(elements, start, offset(rowId + 1) - start);
  }

  /** Bit {@code i} of an Arrow bitmap (validity, or boolean values): least significant first. */
  private static boolean bit(long bitmap, int i) {
    return (Platform.getByte(null, bitmap + (i >> 3)) >> (i & 7) & 1) == 1;
  }

  /** Where value {@code i} of a string, binary or list column starts (32-bit offsets). */
  private int offset(int i) {
    return Platform.getInt(null, offsets + 4L * i);
  }
}
