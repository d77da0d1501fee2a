package lance_spark.companion;

import java.util.Collections;
import java.util.Set;
import java.util.WeakHashMap;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;

import org.apache.spark.sql.catalyst.FunctionIdentifier;
import org.apache.spark.sql.catalyst.parser.ParserInterface;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.ExpressionInfo;
import org.apache.spark.sql.catalyst.expressions.Literal$;

import scala.Tuple3;
import scala.collection.immutable.Seq;
import scala.runtime.AbstractFunction1;
import scala.runtime.AbstractFunction2;
import scala.runtime.BoxedUnit;

/**
 * The companion's entry point: {@code spark.sql.extensions=lance_spark.companion.LanceExtensions}
 * (what {@code lance_spark.configure(builder)} sets), or {@link #installOn} on a running classic
 * session (what {@code lance_spark.register(spark)} calls when the jar is on the class path).
 *
 * <p>It adds optimizer rules: {@link LanceScanRule} (reads), {@link LanceWriteRule} (writes),
 * {@link LanceMergePruning}, {@link LanceStatementParameters} (history); an analyzer rule, {@link LanceInsertOnlyMerge}; the SQL parser of Lance's statements ({@link LanceSqlParser}, in sessions built with
 * the extension: a running session keeps its parser), the table function {@code lance_search}
 * ({@link LanceSearchFunction}), and the SQL function {@code lance_companion_protocol()} (the {@link #PROTOCOL} of
 * this jar), by which a client with no JVM of its own (Spark Connect) asks its server whether the
 * companion is loaded ({@code lance_spark.companion_enabled}).
 *
 * <p>Spark internals it depends on: {@code SparkSessionExtensions.injectPreCBORule} (the "Pre CBO
 * Rules" batch runs right before "Early Filter and Projection Push-Down", where
 * {@code V2ScanRelationPushDown} asks a table for its scan builder); for {@link #installOn},
 * {@code classic.SparkSession.extensions()} and {@code BaseSessionStateBuilder} reading the
 * injected pre-CBO rules at every optimizer run (not once per session); for the function,
 * {@code SparkSessionExtensions.injectFunction} with catalyst's {@code FunctionIdentifier},
 * {@code ExpressionInfo} and {@code Literal}.
 */
public final class LanceExtensions extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {
  /** Bumped with every change of the protocol between this jar and {@code lance_spark}. */
  public static final int PROTOCOL = 9;

  /** The SQL function that answers {@link #PROTOCOL} in a session the companion is loaded in. */
  public static final String PROTOCOL_FUNCTION = "lance_companion_protocol";

  private static final Set<SparkSessionExtensions> INSTALLED =
      Collections.synchronizedSet(Collections.newSetFromMap(new WeakHashMap<>()));

  @Override
  public BoxedUnit apply(SparkSessionExtensions extensions) {
    install(extensions);
    return BoxedUnit.UNIT;
  }

  private static void install(SparkSessionExtensions extensions) {
    if (INSTALLED.add(extensions)) {
      extensions.injectPreCBORule(new AbstractFunction1<SparkSession, Rule<LogicalPlan>>() {
        @Override
        public Rule<LogicalPlan> apply(SparkSession session) {
          return new LanceScanRule();
        }
      });
      extensions.injectPreCBORule(new AbstractFunction1<SparkSession, Rule<LogicalPlan>>() {
        @Override
        public Rule<LogicalPlan> apply(SparkSession session) {
          return new LanceWriteRule();
        }
      });
      extensions.injectPreCBORule(new AbstractFunction1<SparkSession, Rule<LogicalPlan>>() {
        @Override
        public Rule<LogicalPlan> apply(SparkSession session) {
          return new LanceMergePruning();
        }
      });
      extensions.injectPreCBORule(new AbstractFunction1<SparkSession, Rule<LogicalPlan>>() {
        @Override
        public Rule<LogicalPlan> apply(SparkSession session) {
          return new LanceStatementParameters();
        }
      });
      extensions.injectHintResolutionRule(
          new AbstractFunction1<SparkSession, Rule<LogicalPlan>>() {
            @Override
            public Rule<LogicalPlan> apply(SparkSession session) {
              return new LanceInsertOnlyMerge(session);
            }
          });
      extensions.injectParser(
          new AbstractFunction2<SparkSession, ParserInterface, ParserInterface>() {
            @Override
            public ParserInterface apply(SparkSession session, ParserInterface parser) {
              return new LanceSqlParser(parser);
            }
          });
      extensions.injectFunction(
          new Tuple3<>(
              new FunctionIdentifier(PROTOCOL_FUNCTION),
              new ExpressionInfo(LanceExtensions.class.getName(), PROTOCOL_FUNCTION),
              new AbstractFunction1<Seq<Expression>, Expression>() {
                @Override
                public Expression apply(Seq<Expression> arguments) {
                  return Literal$.MODULE$.apply(PROTOCOL);
                }
              }));
      extensions.injectTableFunction(
          new Tuple3<>(LanceSearchFunction.ID, LanceSearchFunction.info(), new LanceSearchFunction()));
    }
  }

  /** Turns the companion on for {@code session} and the sessions that share its extensions. */
  public static void installOn(org.apache.spark.sql.classic.SparkSession session) {
    install(session.extensions());
    // A running session built its table functions before: lance_search goes into its registry.
    // (Spark 4.3 keys a registry by qualified names: system.builtin.<name>, as the extension's.)
    var functions = session.sessionState().tableFunctionRegistry();
    FunctionIdentifier qualified = org.apache.spark.sql.catalyst.analysis.FunctionRegistry$.MODULE$
        .builtinFunctionIdentifier(LanceSearchFunction.NAME);
    if (!functions.functionExists(qualified)) {
      functions.registerFunction(qualified, LanceSearchFunction.info(), new LanceSearchFunction());
    }
  }

  /** Whether the companion is on for {@code session}. */
  public static boolean isInstalled(org.apache.spark.sql.classic.SparkSession session) {
    return INSTALLED.contains(session.extensions());
  }
}
