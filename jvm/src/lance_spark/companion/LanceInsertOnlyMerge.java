package lance_spark.companion;

import java.util.List;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.analysis.EliminateSubqueryAliases$;
import org.apache.spark.sql.catalyst.analysis.UnresolvedRelation;
import org.apache.spark.sql.catalyst.expressions.Literal$;
import org.apache.spark.sql.catalyst.plans.logical.DeleteAction;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.MergeAction;
import org.apache.spark.sql.catalyst.plans.logical.MergeIntoTable;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.connector.catalog.CatalogManager;
import org.apache.spark.sql.connector.catalog.CatalogPlugin;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.TableCatalog;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;

import scala.Function1;
import scala.Option;
import scala.PartialFunction$;
import scala.collection.immutable.List$;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Keeps a MERGE into a Lance table that only inserts ({@code WHEN NOT MATCHED} clauses alone) a
 * row-level operation of {@link LanceCatalogTable}: it adds {@code WHEN NOT MATCHED BY SOURCE AND
 * false THEN DELETE}, a clause that never acts. Spark would otherwise plan such a MERGE as a
 * plain append of the source rows the target lacks ({@code InsertOnlyMerge}), which no check of
 * concurrent commits covers: two such statements at once could insert the same new key twice.
 * As a row-level operation it is serializable like every other MERGE (Python's conflict check
 * before the commit), and its history entry is a MERGE with its metrics. A source row matching
 * a target row still does nothing and is not a cardinality violation (Spark checks cardinality
 * only for {@code WHEN MATCHED} clauses).
 *
 * <p>Spark interfaces: a hint resolution rule ({@code injectHintResolutionRule}): the "Hints"
 * batch runs before "Resolution", where Spark 4.3 makes an insert-only MERGE an
 * {@code InsertOnlyMerge} in the same pass that resolves it (before any injected resolution
 * rule sees it resolved). So the rule sees the target unresolved and looks it up in its catalog
 * ({@code CatalogManager}, {@code TableCatalog.loadTable}); a name that is a temporary view or
 * does not load is left to Spark. Only in sessions built with the extension: a session the
 * companion was installed on while running keeps the analyzer it was built with, and there
 * {@code LanceTable.merge} adds the same clause to its statement text. Internals: catalyst's
 * {@code MergeIntoTable} (its fields and {@code copy}), {@code DeleteAction},
 * {@code UnresolvedRelation} and the session's {@code CatalogManager}.
 */
final class LanceInsertOnlyMerge extends Rule<LogicalPlan> {
  private final SparkSession session;

  LanceInsertOnlyMerge(SparkSession session) {
    this.session = session;
  }

  @Override
  public LogicalPlan apply(LogicalPlan plan) {
    Function1<LogicalPlan, LogicalPlan> rewrite = node -> {
      if (node instanceof MergeIntoTable merge
          && merge.matchedActions().isEmpty()
          && merge.notMatchedBySourceActions().isEmpty()
          && !merge.notMatchedActions().isEmpty()
          && isLance(EliminateSubqueryAliases$.MODULE$.apply(merge.targetTable()))) {
        MergeAction never = new DeleteAction(Option.apply(Literal$.MODULE$.FalseLiteral()));
        return merge.copy(merge.targetTable(), merge.sourceTable(), merge.mergeCondition(),
            merge.matchedActions(), merge.notMatchedActions(),
            List$.MODULE$.<MergeAction>empty().$colon$colon(never), merge.withSchemaEvolution());
      }
      return node;
    };
    return plan.transformDown(PartialFunction$.MODULE$.fromFunction(rewrite));
  }

  private boolean isLance(LogicalPlan target) {
    if (target instanceof DataSourceV2Relation relation) {
      return relation.table() instanceof LanceCatalogTable;
    }
    if (!(target instanceof UnresolvedRelation relation)) {
      return false;
    }
    List<String> parts = CollectionConverters.asJava(relation.multipartIdentifier());
    if (parts.isEmpty() || session.sessionState().catalog().isTempView(relation.multipartIdentifier())) {
      return false;
    }
    CatalogManager catalogs = session.sessionState().catalogManager();
    CatalogPlugin catalog = catalogs.currentCatalog();
    List<String> rest = parts;
    if (parts.size() > 1 && catalogs.isCatalogRegistered(parts.get(0))) {
      catalog = catalogs.catalog(parts.get(0));
      rest = parts.subList(1, parts.size());
    }
    if (!(catalog instanceof TableCatalog tables)) {
      return false;
    }
    String[] namespace = rest.size() > 1
        ? rest.subList(0, rest.size() - 1).toArray(new String[0])
        : catalogs.currentNamespace();
    try {
      return tables.loadTable(Identifier.of(namespace, rest.get(rest.size() - 1)))
          instanceof LanceCatalogTable;
    } catch (Exception notLoaded) {
      return false; // Spark reports the name when it resolves it
    }
  }
}
