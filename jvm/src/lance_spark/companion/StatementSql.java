package lance_spark.companion;

import java.util.ArrayList;
import java.util.List;
import java.util.UUID;

import org.apache.spark.sql.catalyst.expressions.CreateNamedStruct;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.LambdaFunction;
import org.apache.spark.sql.catalyst.expressions.NamedLambdaVariable;
import org.apache.spark.sql.catalyst.expressions.PrettyAttribute;
import org.apache.spark.sql.catalyst.expressions.PythonUDF;
import org.apache.spark.sql.execution.python.UserDefinedPythonFunction;

import scala.jdk.javaapi.CollectionConverters;

/**
 * The Spark SQL text of a resolved expression that Spark parses back to the same expression,
 * for the table API's statements (a Column given to {@code LanceTable.update}, a MERGE's
 * clauses): Spark's own {@code Expression.sql} but for what it prints lossily. A Python UDF
 * is registered as a temporary function of the session under a new name (the caller drops
 * it after the statement) and called by that name; a lambda is printed as {@code x -> ...};
 * a struct keeps its field names ({@code named_struct}).
 *
 * <p>Spark internals (in the upgrade checklist, docs/project/internals.md): {@code PythonUDF},
 * {@code UserDefinedPythonFunction}, {@code UDFRegistration.registerPython},
 * {@code PrettyAttribute}, {@code LambdaFunction}, {@code NamedLambdaVariable}.
 */
public final class StatementSql {
  private StatementSql() {}

  /** {@code [sql, the temporary functions registered for it...]}. */
  public static String[] render(
      Expression expression, org.apache.spark.sql.classic.SparkSession session) {
    List<String> functions = new ArrayList<>();
    String sql = sql(expression, session, functions);
    List<String> result = new ArrayList<>();
    result.add(sql);
    result.addAll(functions);
    return result.toArray(new String[0]);
  }

  private static String sql(
      Expression e, org.apache.spark.sql.classic.SparkSession session, List<String> functions) {
    if (e instanceof PythonUDF udf) {
      String name = "lance_spark_udf_" + UUID.randomUUID().toString().replace("-", "");
      session.udf().registerPython(name, new UserDefinedPythonFunction(
          name, udf.func(), udf.dataType(), udf.evalType(), udf.udfDeterministic(),
          UserDefinedPythonFunction.$lessinit$greater$default$6(),
          UserDefinedPythonFunction.$lessinit$greater$default$7()));
      functions.add(name);
      List<String> args = new ArrayList<>();
      for (Expression child : CollectionConverters.asJava(udf.children())) {
        args.add(sql(child, session, functions));
      }
      return name + "(" + String.join(", ", args) + ")";
    }
    if (e instanceof NamedLambdaVariable variable) {
      return quoted(variable.name());
    }
    if (e instanceof LambdaFunction lambda) {
      List<String> args = new ArrayList<>();
      for (Expression argument : CollectionConverters.asJava(lambda.children()).subList(
          1, lambda.children().size())) {
        args.add(sql(argument, session, functions));
      }
      // Spark's grammar: x -> ..., (x, y) -> ...
      String names = args.size() == 1 ? args.get(0) : "(" + String.join(", ", args) + ")";
      return names + " -> " + sql(lambda.function(), session, functions);
    }
    if (e instanceof CreateNamedStruct struct) {
      List<String> parts = new ArrayList<>();
      for (Expression child : CollectionConverters.asJava(struct.children())) {
        parts.add(sql(child, session, functions));
      }
      return "named_struct(" + String.join(", ", parts) + ")";
    }
    if (e.children().isEmpty()) {
      return e.sql();
    }
    // Spark's own text of e, each child printed as above (PrettyAttribute prints its name).
    List<Expression> children = new ArrayList<>();
    for (Expression child : CollectionConverters.asJava(e.children())) {
      children.add(new PrettyAttribute(sql(child, session, functions), child.dataType()));
    }
    return e.withNewChildren(CollectionConverters.asScala(children).toSeq()).sql();
  }

  private static String quoted(String name) {
    return "`" + name.replace("`", "``") + "`";
  }
}
