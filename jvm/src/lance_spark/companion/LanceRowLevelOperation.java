package lance_spark.companion;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.spark.sql.connector.distributions.Distribution;
import org.apache.spark.sql.connector.distributions.Distributions;
import org.apache.spark.sql.connector.expressions.Expression;
import org.apache.spark.sql.connector.expressions.Expressions;
import org.apache.spark.sql.connector.expressions.NamedReference;
import org.apache.spark.sql.connector.expressions.NullOrdering;
import org.apache.spark.sql.connector.expressions.SortDirection;
import org.apache.spark.sql.connector.expressions.SortOrder;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DeltaBatchWrite;
import org.apache.spark.sql.connector.write.DeltaWrite;
import org.apache.spark.sql.connector.write.DeltaWriteBuilder;
import org.apache.spark.sql.connector.write.DeltaWriterFactory;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.RequiresDistributionAndOrdering;
import org.apache.spark.sql.connector.write.SupportsDelta;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * One MERGE, UPDATE or DELETE on a Lance table, as Spark plans it: delta-based (public DSv2
 * {@code SupportsDelta}). The scan reads the table at the version the operation pinned, with
 * the row address ({@code _rowaddr}, the row id Spark keys deletes and updates by), the
 * fragment id and the stable row id ({@code _fragid}, {@code _rowid}: metadata Spark carries to
 * the writer). The write asks Spark for every fragment's rows in one task, ordered by row
 * address, inserts last ({@code RequiresDistributionAndOrdering}): each fragment's deletion
 * file is then written by one task, which holds one fragment's offsets at a time. The tasks
 * hand Spark's deletes, updates and inserts to Python ({@link LanceDeltaWriter}); Python's
 * {@code RowLevelWriter} writes the new fragments and deletion files and commits ONE Lance
 * version on the driver (after its check of concurrent commits). A MERGE whose target read
 * {@link LanceMergePruning} narrowed to the source's keys passes that filter to the write: the
 * check then counts only the rows committed meanwhile that match it.
 *
 * <p>Inserted rows have no fragment: they all land in one task (DSv2 cannot ask to cluster by
 * fragment and spread the rows without one). A MERGE with only NOT MATCHED clauses is an
 * append in Spark's plan and writes in parallel.
 *
 * <p>Spark interfaces: {@code RowLevelOperation}, {@code SupportsDelta},
 * {@code DeltaWriteBuilder}, {@code DeltaWrite}, {@code RequiresDistributionAndOrdering},
 * {@code DeltaBatchWrite} (all public DSv2).
 */
final class LanceRowLevelOperation implements SupportsDelta {
  static final String ROW_ADDRESS = "_rowaddr";
  static final String FRAGMENT = "_fragid";
  static final String ROW_ID = "_rowid";

  // The Python writer's options of a row-level operation (lance_spark/source/options.py).
  static final String OPERATION_OPTION = LanceOptions.name("rowLevelOperation");
  static final String VERSION_OPTION = LanceOptions.name("rowLevelVersion");
  static final String READ_FILTER_OPTION = LanceOptions.name("rowLevelReadFilter");
  // The history entry's operationParameters, as JSON (lance_spark/source/options.py).
  static final String PARAMETERS_OPTION = LanceOptions.name("statementParameters");
  // The delta columns before the table's in each change row (lance_spark/source/row_level.py).
  static final String OPERATION_COLUMN = "__lance_spark_operation";
  static final String ROW_ADDRESS_COLUMN = "__lance_spark_row_address";
  static final String ROW_ID_COLUMN = "__lance_spark_row_id_value";

  private final LanceCatalogTable table;
  private final Command command;
  private final long version;
  // The Lance predicate that bounds every row the scan reads (LanceMergePruning's key filter,
  // when it is all the statement reads of the table), for Python's conflict check; or null.
  private volatile String readFilter;
  // What the statement is, for the history entry (LanceStatementParameters); or null.
  private volatile ObjectNode parameters;

  LanceRowLevelOperation(LanceCatalogTable table, Command command, long version) {
    this.table = table;
    this.command = command;
    this.version = version;
  }

  @Override
  public Command command() {
    return command;
  }

  @Override
  public String description() {
    return "Lance " + command + " of " + table.name() + " at version " + version;
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    readFilter = options.get(LanceMergePruning.READ_SET_OPTION);
    return table.scanAt(version, options);
  }

  /** Sets what the history entry's {@code operationParameters} say of this statement. */
  void describe(ObjectNode statement) {
    parameters = statement;
  }

  @Override
  public NamedReference[] rowId() {
    return new NamedReference[] {Expressions.column(ROW_ADDRESS)};
  }

  @Override
  public NamedReference[] requiredMetadataAttributes() {
    return new NamedReference[] {Expressions.column(FRAGMENT), Expressions.column(ROW_ID)};
  }

  @Override
  public DeltaWriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    return new DeltaWriteBuilder() {
      @Override
      public DeltaWrite build() {
        return new Write(info);
      }
    };
  }

  /**
   * The history entry's parameters: the plan's ({@link #describe}) with the ones the
   * statement names ({@code given}, a JSON object, or null) over them; null when neither.
   */
  private String described(String given) {
    ObjectNode plan = parameters;
    if (plan == null) {
      return null;
    }
    ObjectNode merged = plan.deepCopy();
    if (given != null) {
      try {
        if (LancePlanner.JSON.readTree(given) instanceof ObjectNode named) {
          merged.setAll(named);
        }
      } catch (JsonProcessingException malformed) {
        return null; // Python's option parser names the option and the bad text
      }
    }
    return merged.toString();
  }

  /** The change rows' schema: the delta columns, then {@code data}'s, all nullable. */
  static StructType changeSchema(StructType data) {
    List<StructField> fields = new ArrayList<>();
    fields.add(DataTypes.createStructField(OPERATION_COLUMN, DataTypes.IntegerType, false));
    fields.add(DataTypes.createStructField(ROW_ADDRESS_COLUMN, DataTypes.LongType, true));
    fields.add(DataTypes.createStructField(ROW_ID_COLUMN, DataTypes.LongType, true));
    for (StructField field : data.fields()) {
      fields.add(new StructField(field.name(), field.dataType(), true, field.metadata()));
    }
    return DataTypes.createStructType(fields);
  }

  private final class Write implements DeltaWrite, RequiresDistributionAndOrdering {
    private final LogicalWriteInfo info;

    Write(LogicalWriteInfo info) {
      this.info = info;
    }

    @Override
    public String description() {
      return LanceRowLevelOperation.this.description();
    }

    @Override
    public Distribution requiredDistribution() {
      return Distributions.clustered(new Expression[] {Expressions.column(FRAGMENT)});
    }

    @Override
    public SortOrder[] requiredOrdering() {
      return new SortOrder[] {
        Expressions.sort(
            Expressions.column(FRAGMENT), SortDirection.ASCENDING, NullOrdering.NULLS_LAST),
        Expressions.sort(Expressions.column(ROW_ADDRESS), SortDirection.ASCENDING)
      };
    }

    @Override
    public DeltaBatchWrite toBatch() {
      StructType metadata = info.metadataSchema().orElseThrow(
          () -> new IllegalStateException(description() + ": Spark gave no metadata columns"));
      int rowId = metadata.fieldIndex(ROW_ID);
      Map<String, String> extra = new HashMap<>(
          Map.of(OPERATION_OPTION, command.name(), VERSION_OPTION, Long.toString(version)));
      String filter = readFilter;
      if (filter != null) {
        extra.put(READ_FILTER_OPTION, filter);
      }
      String described = described(info.options().get(PARAMETERS_OPTION));
      if (described != null) {
        extra.put(PARAMETERS_OPTION, described);
      }
      BatchWrite python = table.changeWrite(info, changeSchema(info.schema()), extra);
      return new Batch(python, info.schema().fields().length, rowId);
    }
  }

  /** Spark's Python batch write of the change rows, fed by {@link LanceDeltaWriter}s. */
  private static final class Batch implements DeltaBatchWrite {
    private final BatchWrite python;
    private final int width;
    private final int rowId;

    Batch(BatchWrite python, int width, int rowId) {
      this.python = python;
      this.width = width;
      this.rowId = rowId;
    }

    @Override
    public DeltaWriterFactory createBatchWriterFactory(PhysicalWriteInfo info) {
      return new LanceDeltaWriter.Factory(python.createBatchWriterFactory(info), width, rowId);
    }

    @Override
    public boolean useCommitCoordinator() {
      return python.useCommitCoordinator();
    }

    @Override
    public void commit(WriterCommitMessage[] messages) {
      python.commit(messages);
    }

    @Override
    public void abort(WriterCommitMessage[] messages) {
      python.abort(messages);
    }
  }
}
