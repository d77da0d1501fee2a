package lance_spark.companion;

import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.databind.JsonNode;

import org.apache.spark.api.python.PythonFunction;
import org.apache.spark.sql.catalyst.FunctionIdentifier;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.ExpressionInfo;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.NamedArgumentExpression;
import org.apache.spark.sql.catalyst.parser.ParserInterface;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.connector.catalog.CatalogPlugin;
import org.apache.spark.sql.execution.python.UserDefinedPythonTableFunction;
import org.apache.spark.sql.types.DataTypes;

import scala.Option;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractFunction0;
import scala.runtime.AbstractFunction1;

/**
 * The SQL table function {@code lance_search(table, vector, k, ...)} in every client (the
 * {@code spark-sql} CLI, JDBC, Spark Connect without lance_spark, PySpark): Lance's vector and
 * full-text search as rows. The function is Python's ({@code lance_spark.source.search_plans}'s UDTF
 * class, asked from Python through {@link LanceProcedures} with the session's storage
 * options); Spark runs it as it runs any Python UDTF with an {@code analyze} method. What Java
 * adds is the catalog: a table argument that is a name (not a path) becomes the location of
 * that Lance table of the session catalog, so {@code lance_search('pets', ...)} works; a name
 * of a branch is refused (the function searches a table's main line).
 *
 * <p>Spark interfaces: {@code SparkSessionExtensions.injectTableFunction} (public developer
 * API: the builder of a table-valued function).
 *
 * <p>Spark internals: {@code UserDefinedPythonTableFunction} and its {@code builder} (a Python
 * UDTF's plan: there is no public Java API for one), {@code PythonEvalType.SQL_TABLE_UDF} (300),
 * {@code UserDefinedPythonDataSource.createPythonFunction}, catalyst's {@code Literal} and
 * {@code NamedArgumentExpression}; for a running session ({@link LanceExtensions#installOn}),
 * {@code SessionState.tableFunctionRegistry}.
 */
final class LanceSearchFunction extends AbstractFunction1<Seq<Expression>, LogicalPlan> {
  static final String NAME = "lance_search";
  static final FunctionIdentifier ID = new FunctionIdentifier(NAME);

  /** PySpark's {@code PythonEvalType.SQL_TABLE_UDF}: a Python UDTF (not Arrow-optimized). */
  private static final int TABLE_UDF = 300;

  /** The argument naming the table. */
  private static final String TABLE = "table";

  /** The Python call that answers the UDTF ({@code procedures.SEARCH_FUNCTION_CALL}). */
  private static final String CALL = "search_function";

  static ExpressionInfo info() {
    return new ExpressionInfo(LanceSearchFunction.class.getName(), NAME);
  }

  @Override
  public LogicalPlan apply(Seq<Expression> arguments) {
    List<Expression> given = CollectionConverters.asJava(arguments);
    List<Expression> resolved = new ArrayList<>();
    for (int i = 0; i < given.size(); i++) {
      Expression argument = given.get(i);
      if (argument instanceof NamedArgumentExpression named
          && TABLE.equalsIgnoreCase(named.key())) {
        resolved.add(new NamedArgumentExpression(named.key(), location(named.value())));
      } else if (i == 0 && !(argument instanceof NamedArgumentExpression)) {
        resolved.add(location(argument));
      } else {
        resolved.add(argument);
      }
    }
    org.apache.spark.sql.classic.SparkSession session = LancePlanner.session();
    JsonNode reply = LanceProcedures.run(Map.of(), CALL, LancePlanner.JSON.createObjectNode());
    PythonFunction function = LanceSessionCatalog.provider().source()
        .createPythonFunction(Base64.getDecoder().decode(reply.get("udtf").asText()));
    UserDefinedPythonTableFunction udtf =
        new UserDefinedPythonTableFunction(NAME, function, Option.empty(), TABLE_UDF, true);
    return udtf.builder(
        CollectionConverters.asScala(resolved).toSeq(),
        new AbstractFunction0<ParserInterface>() {
          @Override
          public ParserInterface apply() {
            return session.sessionState().sqlParser();
          }
        });
  }

  /**
   * {@code table} as the function takes it: a string naming a Lance table of the session
   * catalog becomes that table's location; a path (and anything else) stays as it is.
   */
  private static Expression location(Expression table) {
    if (!(table instanceof Literal literal) || !DataTypes.StringType.equals(literal.dataType())
        || literal.value() == null) {
      return table;  // not a constant string: Python's error says what it must be
    }
    String name = literal.value().toString();
    if (name.isEmpty() || LanceSessionCatalog.isPath(name)) {
      return table;
    }
    CatalogPlugin catalog = (LancePlanner.session()).sessionState().catalogManager()
        .v2SessionCatalog();
    if (!(catalog instanceof LanceSessionCatalog lance)) {
      return table;  // no catalog of Lance tables to ask: Python's error names the path
    }
    Map<String, String> options = lance.procedureTarget(name, NAME);
    if (options.keySet().stream().anyMatch(k -> k.equalsIgnoreCase(LanceSessionCatalog.BRANCH))) {
      throw new IllegalArgumentException(
          NAME + " searches a table's main branch, not the branch " + name
              + "; search it with LanceTable.forName(spark, table).branch(name).search(...)");
    }
    return Literal.create(options.get(LanceWriteTable.PATH), DataTypes.StringType);
  }
}
