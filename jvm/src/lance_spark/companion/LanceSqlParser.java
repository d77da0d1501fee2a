package lance_spark.companion;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

import org.apache.spark.sql.catalyst.FunctionIdentifier;
import org.apache.spark.sql.catalyst.TableIdentifier;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.parser.ParameterContext;
import org.apache.spark.sql.catalyst.parser.ParseException;
import org.apache.spark.sql.catalyst.parser.ParserInterface;
import org.apache.spark.sql.catalyst.parser.SqlStatementSplitResult;
import org.apache.spark.sql.catalyst.parser.TemporalIdentifier;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;

import scala.collection.immutable.Seq;

/**
 * Lance's statements in Spark's SQL, the way Delta's SQL extension spells them, for every
 * client: {@code DESCRIBE|DESC HISTORY t [LIMIT n]}, {@code RESTORE [TABLE] t [TO] VERSION AS OF
 * n | 'tag' | TIMESTAMP AS OF 'ts'}, {@code VACUUM t [RETAIN n HOURS] [DRY RUN]},
 * {@code OPTIMIZE t}, {@code OPTIMIZE t INDEXES|INDEX name [RETRAIN]}, {@code DESCRIBE|DESC DETAIL t}, {@code CONVERT TO LANCE parquet.`path`
 * LOCATION 'path'} (see {@link #convert}), lance_spark's first spelling of
 * {@code CREATE INDEX} (see {@link #createIndex}), {@code ALTER TABLE t CREATE TAG name [AS OF VERSION n]},
 * {@code ALTER TABLE t DROP TAG name}, {@code ALTER TABLE t CREATE BRANCH [IF NOT EXISTS] name
 * [AS OF VERSION n | 'tag']}, {@code ALTER TABLE t DROP BRANCH [IF EXISTS] name},
 * {@code ALTER TABLE t UPDATE COLUMNS [(]c1, c2[)] FROM source ON key} (see {@link #updateColumns}) and
 * {@code SHOW BRANCHES {IN | FROM} t}, where
 * {@code t} is a table name ({@code t.branch_b} too), {@code lance.`/path`} or a quoted path.
 * Each becomes the call of the session catalog's procedure ({@link LanceProcedures}):
 * {@code CALL spark_catalog.system.history(table => 't', limit => n)}, which Spark's own parser
 * parses. Every other statement is Spark's parser's, untouched.
 *
 * <p>Spark interface: {@code ParserInterface} (the parser of
 * {@code SparkSessionExtensions.injectParser}; public developer API), delegating everything to
 * Spark's parser. {@link #translate} is also what {@code lance_spark.register} uses for a
 * running classic session, whose parser was built before the extension was loaded.
 */
public final class LanceSqlParser implements ParserInterface {
  private final ParserInterface delegate;

  public LanceSqlParser(ParserInterface delegate) {
    this.delegate = delegate;
  }

  /** The {@code CALL} statement {@code sql} stands for, or null when it is not Lance's. */
  public static String translate(String sql) {
    List<String> tokens = tokens(sql);
    if (tokens == null || tokens.isEmpty()) {
      return null;
    }
    Cursor c = new Cursor(tokens);
    if (c.accept("DESCRIBE") || c.accept("DESC")) {
      if (c.accept("DETAIL")) {
        String table = c.table();
        return table == null || !c.atEnd() ? null : call("detail", table);
      }
      if (!c.accept("HISTORY")) {
        return null;
      }
      String table = c.table();
      String limit = null;
      if (table != null && c.accept("LIMIT")) {
        limit = c.integer();
        if (limit == null) {
          return null;
        }
      }
      return table == null || !c.atEnd() ? null : call("history", table, "limit", limit);
    }
    if (c.accept("RESTORE")) {
      c.accept("TABLE");
      String table = c.table();
      if (table == null) {
        return null;
      }
      c.accept("TO");
      if (c.accept("VERSION") && c.accept("AS") && c.accept("OF")) {
        String version = c.integer();
        if (version != null) {
          return c.atEnd() ? call("restore", table, "version", version) : null;
        }
        String tag = c.string();
        return tag == null || !c.atEnd() ? null : call("restore", table, "tag", literal(tag));
      }
      if (c.accept("TIMESTAMP") && c.accept("AS") && c.accept("OF")) {
        String when = c.string();
        return when == null || !c.atEnd()
            ? null
            : call("restore", table, "timestamp", literal(when));
      }
      return null;
    }
    if (c.accept("SHOW")) {
      if (!c.accept("BRANCHES") || !(c.accept("IN") || c.accept("FROM"))) {
        return null;
      }
      String table = c.table();
      return table == null || !c.atEnd() ? null : call("branches", table);
    }
    if (c.accept("ALTER")) {
      return c.accept("TABLE") ? alterTable(c) : null;
    }
    if (c.accept("CREATE") && c.accept("INDEX")) {
      return createIndex(c);
    }
    if (c.accept("CONVERT")) {
      return c.accept("TO") && c.accept("LANCE") ? convert(c) : null;
    }
    if (c.accept("OPTIMIZE")) {
      String table = c.table();
      if (table == null) {
        return null;
      }
      if (c.accept("INDEXES")) {  // OPTIMIZE t INDEXES [RETRAIN]
        boolean retrain = c.accept("RETRAIN");
        return c.atEnd() ? call("optimize_indices", table, "retrain", retrain ? "true" : null)
            : null;
      }
      if (c.accept("INDEX")) {  // OPTIMIZE t INDEX name [RETRAIN]
        String index = c.name();
        boolean retrain = c.accept("RETRAIN");
        return index == null || !c.atEnd() ? null : call("optimize_indices", table,
            "index", literal(index), "retrain", retrain ? "true" : null);
      }
      return c.atEnd() ? call("optimize", table) : null;
    }
    if (c.accept("VACUUM")) {
      String table = c.table();
      if (table == null) {
        return null;
      }
      String hours = null;
      if (c.accept("RETAIN")) {
        hours = c.number();
        if (hours == null || !c.accept("HOURS")) {
          return null;
        }
      }
      boolean dryRun = c.accept("DRY") && c.accept("RUN");
      return c.atEnd() ? call("vacuum", table, "retain_hours", hours, "dry_run",
          dryRun ? "true" : null) : null;
    }
    return null;
  }

  /**
   * lance_spark's first spelling of CREATE INDEX, {@code CREATE INDEX name ON t (column) [USING
   * type] [WITH (key = value, ...)]}, as Spark's statement ({@code CREATE INDEX name ON t USING
   * type (column) OPTIONS (...)}, which {@link LanceCatalogTable} runs); null for Spark's own
   * spelling and anything else.
   */
  private static String createIndex(Cursor c) {
    String index = c.name();
    if (index == null || !c.accept("ON")) {
      return null;
    }
    String table = c.table();
    if (table == null || !c.accept("(")) {
      return null;
    }
    String column = c.name();
    if (column == null || !c.accept(")")) {
      return null;
    }
    String type = null;
    if (c.accept("USING")) {
      type = c.name();
      if (type == null) {
        return null;
      }
    }
    List<String> options = new ArrayList<>();
    if (c.accept("WITH")) {
      if (!c.accept("(")) {
        return null;
      }
      do {
        String key = c.name();
        if (key == null || !c.accept("=")) {
          return null;
        }
        String value = c.string();
        value = value != null ? literal(value) : c.number();
        if (value == null) {
          value = c.accept("TRUE") ? "true" : c.accept("FALSE") ? "false" : null;
        }
        if (value == null) {
          return null;
        }
        options.add(quoted(key) + " = " + value);
      } while (c.accept(","));
      if (!c.accept(")")) {
        return null;
      }
    }
    if (!c.atEnd() || (type == null && options.isEmpty())) {
      return null;  // CREATE INDEX name ON t (column) is Spark's spelling too
    }
    return "CREATE INDEX " + quoted(index) + " ON " + table
        + (type == null ? "" : " USING " + quoted(type)) + " (" + quoted(column) + ")"
        + (options.isEmpty() ? "" : " OPTIONS (" + String.join(", ", options) + ")");
  }

  /**
   * {@code CONVERT TO LANCE parquet.`<path>` LOCATION '<path or URI>'}, or a Parquet table's
   * name in place of {@code parquet.`<path>`}: Delta's {@code CONVERT TO DELTA}, except that
   * Lance's files are not Parquet, so the Lance table is written at its own location.
   */
  private static String convert(Cursor c) {
    String source;
    if (c.accept("PARQUET")) {
      if (!c.accept(".")) {
        return null;
      }
      source = c.name();
    } else {
      source = c.string();  // a quoted path
      if (source == null) {
        source = c.table();  // a Parquet table of the catalog
      }
    }
    if (source == null || !c.accept("LOCATION")) {
      return null;
    }
    String target = c.string();
    if (target == null || !c.atEnd()) {
      return null;
    }
    String table = PythonTableView.FORMAT + ".`" + target.replace("`", "``") + "`";
    return call("convert", table, "source", literal(source));
  }

  /** {@code name} as a backquoted SQL identifier. */
  private static String quoted(String name) {
    return "`" + name.replace("`", "``") + "`";
  }

  /**
   * ALTER TABLE t {CREATE | DROP} {TAG | BRANCH} ... and ALTER TABLE t UPDATE COLUMNS ...; null
   * for Spark's own ALTER TABLE.
   */
  private static String alterTable(Cursor c) {
    String table = c.table();
    if (table == null) {
      return null;
    }
    if (c.accept("UPDATE")) {
      return c.accept("COLUMNS") ? updateColumns(c, table) : null;
    }
    boolean create = c.accept("CREATE");
    if (!create && !c.accept("DROP")) {
      return null;
    }
    if (c.accept("TAG")) {
      String tag = c.name();
      if (tag == null) {
        return null;
      }
      if (!create) {
        return c.atEnd() ? call("drop_tag", table, "tag", literal(tag)) : null;
      }
      String version = null;
      if (c.accept("AS")) {
        if (!(c.accept("OF") && c.accept("VERSION"))) {
          return null;
        }
        version = c.integer();
        if (version == null) {
          return null;
        }
      }
      return c.atEnd() ? call("create_tag", table, "tag", literal(tag), "version", version) : null;
    }
    if (!c.accept("BRANCH")) {
      return null;
    }
    boolean guarded = create
        ? c.accept("IF") && c.accept("NOT") && c.accept("EXISTS")
        : c.accept("IF") && c.accept("EXISTS");
    String branch = c.name();
    if (branch == null) {
      return null;
    }
    if (!create) {
      return c.atEnd()
          ? call("drop_branch", table, "branch", literal(branch), "if_exists",
              guarded ? "true" : null)
          : null;
    }
    String version = null;
    String tag = null;
    if (c.accept("AS")) {
      if (!(c.accept("OF") && c.accept("VERSION"))) {
        return null;
      }
      version = c.integer();
      if (version == null) {
        tag = c.string();
        if (tag == null) {
          return null;
        }
      }
    }
    return c.atEnd()
        ? call("create_branch", table, "branch", literal(branch), "version", version, "tag",
            tag == null ? null : literal(tag), "if_not_exists", guarded ? "true" : null)
        : null;
  }

  /**
   * {@code ALTER TABLE t UPDATE COLUMNS [(]c1, c2[)] FROM source ON key}: the table's columns
   * {@code c1, c2} get the values of the source's columns of the same names, for the rows whose
   * {@code key} the source (a table or view name, or {@code lance.`path`}) holds; the other rows
   * keep theirs ({@code LanceTable.updateColumns}). The names travel as a JSON list, which keeps
   * a name with a comma whole.
   */
  private static String updateColumns(Cursor c, String table) {
    boolean parenthesized = c.accept("(");
    List<String> columns = new ArrayList<>();
    do {
      String column = c.name();
      if (column == null) {
        return null;
      }
      columns.add(column);
    } while (c.accept(","));
    if ((parenthesized && !c.accept(")")) || !c.accept("FROM")) {
      return null;
    }
    String source = c.table();
    if (source == null || !c.accept("ON")) {
      return null;
    }
    String key = c.name();
    if (key == null || !c.atEnd()) {
      return null;
    }
    String names;
    try {
      names = LancePlanner.JSON.writeValueAsString(columns);
    } catch (com.fasterxml.jackson.core.JsonProcessingException e) {
      throw new IllegalStateException(e);  // a list of strings always serializes
    }
    return call("update_columns", table, "source", literal(source), "on", literal(key),
        "columns", literal(names));
  }

  private static String call(String procedure, String table, String... namedValues) {
    StringBuilder out = new StringBuilder("CALL spark_catalog.")
        .append(LanceProcedures.NAMESPACE).append('.').append(procedure)
        .append("(table => ").append(literal(table));
    for (int i = 0; i < namedValues.length; i += 2) {
      if (namedValues[i + 1] != null) {
        out.append(", ").append(namedValues[i]).append(" => ").append(namedValues[i + 1]);
      }
    }
    return out.append(')').toString();
  }

  /** {@code text} as a SQL string literal. */
  private static String literal(String text) {
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'";
  }

  /**
   * The statement's tokens: words, numbers, quoted strings (kept with their quotes), backquoted
   * names (kept with their backquotes), dots, parentheses, commas and {@code =}; a trailing
   * semicolon dropped. Null when it has
   * anything else (a comment, an unclosed quote): not a statement of ours.
   */
  private static List<String> tokens(String sql) {
    List<String> out = new ArrayList<>();
    int i = 0;
    int n = sql.length();
    while (i < n) {
      char ch = sql.charAt(i);
      if (Character.isWhitespace(ch)) {
        i++;
      } else if (Character.isLetterOrDigit(ch) || ch == '_') {
        int start = i;
        while (i < n && (Character.isLetterOrDigit(sql.charAt(i)) || sql.charAt(i) == '_'
            || (sql.charAt(i) == '.' && i + 1 < n && Character.isDigit(sql.charAt(i + 1))
                && Character.isDigit(sql.charAt(start))))) {
          i++;
        }
        out.add(sql.substring(start, i));
      } else if (ch == '\'' || ch == '"' || ch == '`') {
        int start = i++;
        StringBuilder value = new StringBuilder().append(ch);
        boolean closed = false;
        while (i < n) {
          char c = sql.charAt(i);
          if (c == '\\' && ch != '`' && i + 1 < n) {
            value.append(sql.charAt(i + 1));
            i += 2;
          } else if (c == ch) {
            if (ch == '`' && i + 1 < n && sql.charAt(i + 1) == '`') {
              value.append('`');
              i += 2;
            } else {
              i++;
              closed = true;
              break;
            }
          } else {
            value.append(c);
            i++;
          }
        }
        if (!closed) {
          return null;
        }
        out.add(value.append(ch).toString());
        if (start == i) {
          return null;
        }
      } else if (ch == '.' || ch == '(' || ch == ')' || ch == ',' || ch == '=') {
        out.add(String.valueOf(ch));
        i++;
      } else if (ch == ';' && sql.substring(i + 1).isBlank()) {
        i = n;
      } else {
        return null;
      }
    }
    return out;
  }

  private static final class Cursor {
    private final List<String> tokens;
    private int at;

    Cursor(List<String> tokens) {
      this.tokens = tokens;
    }

    boolean atEnd() {
      return at == tokens.size();
    }

    boolean accept(String word) {
      if (!atEnd() && tokens.get(at).equalsIgnoreCase(word)) {
        at++;
        return true;
      }
      return false;
    }

    /** A table: a quoted path ({@code lance.`path`} then) or a dotted name, as SQL text. */
    String table() {
      if (atEnd()) {
        return null;
      }
      String first = tokens.get(at);
      if (first.startsWith("'") || first.startsWith("\"")) {
        at++;
        String path = first.substring(1, first.length() - 1);
        return PythonTableView.FORMAT + ".`" + path.replace("`", "``") + "`";
      }
      StringBuilder name = new StringBuilder();
      while (!atEnd()) {
        String part = tokens.get(at);
        if (!(part.startsWith("`") || Character.isLetter(part.charAt(0)) || part.charAt(0) == '_')) {
          return null;
        }
        name.append(part);
        at++;
        if (atEnd() || !tokens.get(at).equals(".")) {
          break;
        }
        name.append('.');
        at++;
      }
      return name.length() == 0 ? null : name.toString();
    }

    /** A name: a word, or a backquoted or quoted name (without its quotes). */
    String name() {
      if (atEnd()) {
        return null;
      }
      String token = tokens.get(at);
      if (token.startsWith("`") || token.startsWith("'") || token.startsWith("\"")) {
        at++;
        return token.substring(1, token.length() - 1);
      }
      if (Character.isLetterOrDigit(token.charAt(0)) || token.charAt(0) == '_') {
        at++;
        return token;
      }
      return null;
    }

    String integer() {
      if (!atEnd() && tokens.get(at).chars().allMatch(Character::isDigit)) {
        return tokens.get(at++);
      }
      return null;
    }

    String number() {
      if (!atEnd() && tokens.get(at).matches("[0-9]+(\\.[0-9]+)?")) {
        return tokens.get(at++);
      }
      return null;
    }

    String string() {
      if (!atEnd() && (tokens.get(at).startsWith("'") || tokens.get(at).startsWith("\""))) {
        String quoted = tokens.get(at++);
        return quoted.substring(1, quoted.length() - 1);
      }
      return null;
    }
  }

  private String own(String sql) {
    String call = translate(sql);
    return call == null ? sql : call;
  }

  @Override
  public LogicalPlan parsePlan(String sqlText) throws ParseException {
    return delegate.parsePlan(own(sqlText));
  }

  @Override
  public LogicalPlan parsePlanWithParameters(String sqlText, ParameterContext context)
      throws ParseException {
    return delegate.parsePlanWithParameters(own(sqlText), context);
  }

  @Override
  public LogicalPlan parseQuery(String sqlText) throws ParseException {
    return delegate.parseQuery(sqlText);
  }

  @Override
  public Expression parseExpression(String sqlText) throws ParseException {
    return delegate.parseExpression(sqlText);
  }

  @Override
  public TableIdentifier parseTableIdentifier(String sqlText) throws ParseException {
    return delegate.parseTableIdentifier(sqlText);
  }

  @Override
  public FunctionIdentifier parseFunctionIdentifier(String sqlText) throws ParseException {
    return delegate.parseFunctionIdentifier(sqlText);
  }

  @Override
  public Seq<String> parseMultipartIdentifier(String sqlText) throws ParseException {
    return delegate.parseMultipartIdentifier(sqlText);
  }

  @Override
  public TemporalIdentifier parseTemporalTableIdentifier(String sqlText) throws ParseException {
    return delegate.parseTemporalTableIdentifier(sqlText);
  }

  @Override
  public StructType parseRoutineParam(String sqlText) throws ParseException {
    return delegate.parseRoutineParam(sqlText);
  }

  @Override
  public SqlStatementSplitResult splitStatements(String sqlText) {
    return delegate.splitStatements(sqlText);
  }

  @Override
  public StructType parseTableSchema(String sqlText) throws ParseException {
    return delegate.parseTableSchema(sqlText);
  }

  @Override
  public DataType parseDataType(String sqlText) throws ParseException {
    return delegate.parseDataType(sqlText);
  }
}
