package lance_spark.companion;

import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import org.apache.spark.sql.internal.SQLConf;

import scala.Function1;
import scala.PartialFunction$;

/**
 * Gives every read of a {@code lance} Python table its own scan: replaces the table of each
 * {@code DataSourceV2Relation} that reads a Python data source named {@code lance} by a
 * {@link LanceScanTable}, whose scan builder drives the same Python {@code LanceDataSource}.
 *
 * <p>Spark internals: the relation is still a {@code DataSourceV2Relation} in the pre-CBO batch
 * (V2 scan push-down comes right after); {@code DataSourceV2Relation.copy}. Write commands keep
 * their {@code PythonTable}: their target relation is not a child of the plan.
 */
final class LanceScanRule extends Rule<LogicalPlan> {
  /** A session conf that switches the companion off at run time (also on Spark Connect). */
  static final String ENABLED_CONF = "spark.lance.companion.enabled";

  /**
   * A change feed read (the Python reader computes each version's changes and pushes nothing)
   * keeps Spark's own Python scan; the option, its aliases and its true words are the Python
   * registry's ({@link LanceOptions}).
   */
  static final String CHANGE_FEED_OPTION = LanceOptions.name("readChangeFeed");

  @Override
  public LogicalPlan apply(LogicalPlan plan) {
    if (!Boolean.parseBoolean(SQLConf.get().getConfString(ENABLED_CONF, "true"))) {
      return plan;
    }
    Function1<LogicalPlan, LogicalPlan> replace = node -> {
      if (node instanceof DataSourceV2Relation relation && !isChangeFeed(relation)) {
        if (relation.table() instanceof LanceCatalogTable served) {
          return PythonTableView.withTable(relation, served.withCompanionScan());
        }
        LanceScanTable table = LanceScanTable.wrap(relation.table());
        if (table != null) {
          return PythonTableView.withTable(relation, table);
        }
      }
      return node;
    };
    return plan.transformUp(PartialFunction$.MODULE$.fromFunction(replace));
  }

  private static boolean isChangeFeed(DataSourceV2Relation relation) {
    return LanceOptions.isTrue(LanceOptions.get(relation.options(), CHANGE_FEED_OPTION));
  }
}
