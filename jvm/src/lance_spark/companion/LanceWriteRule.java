package lance_spark.companion;

import org.apache.spark.sql.catalyst.analysis.NamedRelation;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.V2StreamingWriteCommand;
import org.apache.spark.sql.catalyst.plans.logical.V2WriteCommand;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

import scala.Function1;
import scala.PartialFunction$;

/**
 * Gives every write into a {@code lance} Python table (batch: {@code save}, {@code INSERT},
 * {@code INSERT OVERWRITE}, catalog tables; streaming: each micro-batch) the table of
 * {@link LanceWriteTable}, which writes through Spark's own Python write.
 *
 * <p>A write into a catalog table (the relation names a catalog and an identifier: {@code INSERT},
 * {@code INSERT OVERWRITE}, {@code insertInto}, {@code writeTo}, a stream's {@code toTable})
 * goes to that table's location, which Spark hands a Python writer nowhere: the rule passes it
 * to {@link LanceWriteTable}, which gives the Python write the {@code path} option.
 *
 * <p>A write's reads of its own target under the statement's options (an insert-only
 * {@code MERGE INTO t WITH (...)}) keep only the object-store settings of them.
 *
 * <p>Spark internals: {@code V2WriteCommand.withNewTable}, {@code withNewQuery} and
 * {@code V2StreamingWriteCommand.withNewTable} (the write's target relation is a field of the
 * command, not a child, so {@link LanceScanRule} never sees it); the "Pre CBO Rules" batch runs
 * before {@code V2Writes}, which asks the relation's table for its write builder.
 */
final class LanceWriteRule extends Rule<LogicalPlan> {
  @Override
  public LogicalPlan apply(LogicalPlan plan) {
    // Switched off, the companion still gives a catalog write its table's location (without
    // it the write fails), but leaves the batches as Spark makes them.
    boolean sized =
        Boolean.parseBoolean(SQLConf.get().getConfString(LanceScanRule.ENABLED_CONF, "true"));
    Function1<LogicalPlan, LogicalPlan> replace = node -> {
      if (node instanceof V2WriteCommand written) {
        V2WriteCommand command = targetReadsWithoutStatementOptions(written);
        NamedRelation table = wrapped(command.table(), sized);
        return table == null ? (LogicalPlan) command : (LogicalPlan) command.withNewTable(table);
      }
      if (node instanceof V2StreamingWriteCommand command) {
        NamedRelation table = wrapped(command.table(), sized);
        return table == null ? node : (LogicalPlan) command.withNewTable(table);
      }
      return node;
    };
    return plan.transformDown(PartialFunction$.MODULE$.fromFunction(replace));
  }

  /**
   * {@code command} with its query's reads of the target relation itself (the same table
   * with the same options: Spark's insert-only MERGE, an anti join with the target under an
   * {@code AppendData}) given only the object-store settings of the statement's options
   * ({@code MERGE INTO t WITH (...)}): the others are write options, which a read refuses.
   */
  private static V2WriteCommand targetReadsWithoutStatementOptions(V2WriteCommand command) {
    if (!(command.table() instanceof DataSourceV2Relation target) || target.options().isEmpty()) {
      return command;
    }
    Function1<LogicalPlan, LogicalPlan> strip = node -> {
      // The same table (loaded again: another instance) under the same options.
      if (node instanceof DataSourceV2Relation read
          && read.table().name().equals(target.table().name())
          && read.options().equals(target.options())) {
        java.util.Map<String, String> storage = new java.util.HashMap<>();
        read.options().asCaseSensitiveMap().forEach((key, value) -> {
          if (key.toLowerCase(java.util.Locale.ROOT)
              .startsWith(LanceSessionCatalog.STORAGE_PREFIX)) {
            storage.put(key, value);
          }
        });
        return read.copy(read.table(), read.output(), read.catalog(), read.identifier(),
            new CaseInsensitiveStringMap(storage), read.timeTravelSpec());
      }
      return node;
    };
    LogicalPlan query = command.query().transformUp(PartialFunction$.MODULE$.fromFunction(strip));
    return query == command.query() ? command : command.withNewQuery(query);
  }

  private static NamedRelation wrapped(NamedRelation target, boolean sized) {
    if (!(target instanceof DataSourceV2Relation relation)) {
      return null;
    }
    String catalogTable =
        relation.catalog().isDefined() && relation.identifier().isDefined()
            ? relation.identifier().get().toString()
            : null;
    LanceWriteTable table = LanceWriteTable.wrap(relation.table(), catalogTable, sized);
    if (table == null) {
      return null;
    }
    return PythonTableView.withTable(relation, table);
  }
}
