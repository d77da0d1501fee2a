package lance_spark.companion;

import org.apache.spark.sql.catalyst.analysis.NamedRelation;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.V2StreamingWriteCommand;
import org.apache.spark.sql.catalyst.plans.logical.V2WriteCommand;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import org.apache.spark.sql.internal.SQLConf;

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
 * <p>Spark internals: {@code V2WriteCommand.withNewTable} and
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
      if (node instanceof V2WriteCommand command) {
        NamedRelation table = wrapped(command.table(), sized);
        return table == null ? node : (LogicalPlan) command.withNewTable(table);
      }
      if (node instanceof V2StreamingWriteCommand command) {
        NamedRelation table = wrapped(command.table(), sized);
        return table == null ? node : (LogicalPlan) command.withNewTable(table);
      }
      return node;
    };
    return plan.transformDown(PartialFunction$.MODULE$.fromFunction(replace));
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
