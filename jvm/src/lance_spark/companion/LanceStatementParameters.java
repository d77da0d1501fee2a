package lance_spark.companion;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Literal$;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.MergeRows;
import org.apache.spark.sql.catalyst.plans.logical.WriteDelta;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.connector.write.RowLevelOperation;

import scala.Function1;
import scala.PartialFunction$;
import scala.collection.immutable.List$;
import scala.collection.immutable.Seq;
import scala.runtime.BoxedUnit;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Describes each MERGE, UPDATE and DELETE of a Lance table for its history entry's
 * {@code operationParameters}, as Delta does: the statement's {@code predicate} (a MERGE's join
 * condition, an UPDATE's or DELETE's condition), and for a MERGE its clauses
 * ({@code matchedPredicates}, {@code notMatchedPredicates}, {@code notMatchedBySourcePredicates}:
 * JSON lists, as text, of {@code {"actionType": ..., "predicate": ...}}, the predicate omitted when the
 * clause has none). The text is Spark's SQL of the resolved expressions. It hands them to the
 * statement's {@link LanceRowLevelOperation}, which passes them to Python's commit; parameters
 * the statement names itself ({@code WITH ('statementParameters'=...)}, what
 * {@code LanceTable.update} adds) are kept over these. It reads the plan only: it returns it
 * unchanged.
 *
 * <p>Spark interfaces: a pre-CBO optimizer rule ({@code injectPreCBORule}, also in a session
 * the companion was installed on while running), which sees the statement after Spark's
 * rewrite. Internals: catalyst's {@code WriteDelta} ({@code operation}, {@code condition},
 * {@code query}) and {@code MergeRows} with its instructions ({@code Keep} and its context,
 * {@code Split}, {@code Discard}), in which Spark keeps a MERGE's clauses after the rewrite.
 */
final class LanceStatementParameters extends Rule<LogicalPlan> {
  @Override
  public LogicalPlan apply(LogicalPlan plan) {
    plan.foreach(node -> {
      if (node instanceof WriteDelta write
          && write.operation() instanceof LanceRowLevelOperation operation) {
        operation.describe(describe(write, operation.command()));
      }
      return BoxedUnit.UNIT;
    });
    return plan;
  }

  private static ObjectNode describe(WriteDelta write, RowLevelOperation.Command command) {
    ObjectNode parameters = LancePlanner.JSON.createObjectNode();
    if (acts(write.condition())) {
      parameters.put("predicate", text(write.condition()));
    }
    if (command != RowLevelOperation.Command.MERGE) {
      return parameters;
    }
    write.query().foreach(node -> {
      if (node instanceof MergeRows merge) {
        parameters.put("matchedPredicates", clauses(merge.matchedInstructions()));
        parameters.put("notMatchedPredicates", clauses(merge.notMatchedInstructions()));
        parameters.put(
            "notMatchedBySourcePredicates", clauses(merge.notMatchedBySourceInstructions()));
      }
      return BoxedUnit.UNIT;
    });
    return parameters;
  }

  /** The clauses as a JSON list, in a string (operationParameters' values are strings). */
  private static String clauses(Seq<MergeRows.Instruction> instructions) {
    ArrayNode clauses = LancePlanner.JSON.createArrayNode();
    for (MergeRows.Instruction instruction : CollectionConverters.asJava(instructions)) {
      String action;
      if (instruction instanceof MergeRows.Keep keep) {
        action = keep.context().toString().toLowerCase(java.util.Locale.ROOT);
      } else if (instruction instanceof MergeRows.Split) {
        action = "update"; // an update Spark writes as a delete and an insert
      } else {
        continue; // Discard: rows the statement drops from its output, no clause of its own
      }
      Expression condition = instruction.condition();
      if (Literal$.MODULE$.FalseLiteral().semanticEquals(condition)) {
        continue; // the never-acting clause LanceInsertOnlyMerge and LanceTable.merge add
      }
      ObjectNode clause = clauses.addObject();
      clause.put("actionType", action);
      if (acts(condition)) {
        clause.put("predicate", text(condition));
      }
    }
    return clauses.toString();
  }

  /**
   * {@code condition}'s SQL, its columns named as the statement can: under an alias when it
   * gave the table one ({@code t.id}), else by name alone (not {@code spark_catalog.lance.`<uri>`.id}).
   */
  private static String text(Expression condition) {
    Function1<Expression, Expression> shorten = node ->
        node instanceof AttributeReference column && column.qualifier().size() > 1
            ? column.withQualifier(List$.MODULE$.<String>empty())
            : node;
    return condition.transform(PartialFunction$.MODULE$.fromFunction(shorten)).sql();
  }

  /** Whether {@code condition} is one the statement wrote (not Spark's {@code true}). */
  private static boolean acts(Expression condition) {
    return condition != null && !Literal$.MODULE$.TrueLiteral().semanticEquals(condition);
  }
}
