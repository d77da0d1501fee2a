package lance_spark.companion;

import java.util.Map;

import com.fasterxml.jackson.databind.JsonNode;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.read.LocalScan;
import org.apache.spark.sql.internal.connector.SupportsMetadata;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

import scala.jdk.javaapi.CollectionConverters;

/**
 * {@code COUNT(*)} (with the pushed filters) answered at planning from Lance: the row counts in
 * the manifest, or {@code count_rows(filter)}. One row, no Spark job, no data read.
 *
 * <p>Spark internals: {@code LocalScan} (planned as a {@code LocalTableScanExec}) and the output
 * of a completely pushed aggregate (one column per aggregate function, in order).
 */
final class LanceCountScan implements LocalScan, SupportsMetadata {
  private final long count;
  private final int columns;
  private final Map<String, String> metadata;

  /** {@code columns}: how many COUNT(*) the query has (each is one output column). */
  LanceCountScan(JsonNode reply, int columns) {
    JsonNode value = reply.path("count");
    if (!value.isIntegralNumber()) {
      throw new IllegalStateException("lance_spark companion: no count in the reply " + reply);
    }
    this.count = value.asLong();
    this.columns = columns;
    this.metadata = LanceScan.metadataOf(reply);
  }

  @Override
  public InternalRow[] rows() {
    Object[] values = new Object[columns];
    java.util.Arrays.fill(values, count);
    return new InternalRow[] {new GenericInternalRow(values)};
  }

  @Override
  public StructType readSchema() {
    StructType schema = new StructType();
    for (int i = 0; i < columns; i++) {
      schema = schema.add("count(*)", DataTypes.LongType, false);
    }
    return schema;
  }

  @Override
  public String description() {
    return LanceScan.describe("LanceCount", metadata);
  }

  @Override
  public scala.collection.immutable.Map<String, String> getMetaData() {
    return scala.collection.immutable.Map$.MODULE$.from(CollectionConverters.asScala(metadata));
  }
}
