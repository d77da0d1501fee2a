package lance_spark.companion;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.Set;

/**
 * The options of the Python {@code lance} source the companion sets or reads, by the names
 * the Python registry declares ({@code lance_spark/source/options.py}, {@code OPTIONS}).
 *
 * <p>Implements no Spark interface. The registry generates {@code options.properties} (in
 * {@code jvm/resources}, packed into the jar; {@code tests/unit/test_options_registry.py}
 * fails when it and the registry differ): one line {@code option.<key>=<name>} an option, one
 * {@code alias.<key>=<key>} an other name, and the words a boolean option takes as true. A
 * name the companion asks for that the registry lacks fails the companion's class loading,
 * not a user's statement. The resource is read once, when the class loads (the planner rule
 * asks for the change feed option's names at every plan).
 */
final class LanceOptions {
  private static final Properties REGISTRY = load();
  /** Each option's key (lower case) -> its name and its aliases, as the registry lists them. */
  private static final Map<String, List<String>> NAMES = names(REGISTRY);
  private static final Set<String> TRUE_WORDS =
      Set.of(REGISTRY.getProperty("boolean.true", "true").split(","));

  private LanceOptions() {}

  private static Properties load() {
    Properties properties = new Properties();
    try (InputStream in = LanceOptions.class.getResourceAsStream("options.properties")) {
      if (in == null) {
        throw new IllegalStateException("the companion jar has no options.properties");
      }
      properties.load(in);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return properties;
  }

  private static Map<String, List<String>> names(Properties registry) {
    Map<String, List<String>> names = new HashMap<>();
    for (String property : registry.stringPropertyNames()) {
      if (property.startsWith("option.")) {
        names.computeIfAbsent(property.substring("option.".length()), k -> new ArrayList<>())
            .add(0, registry.getProperty(property));
      }
    }
    for (String property : registry.stringPropertyNames()) {
      if (property.startsWith("alias.")) {
        List<String> of = names.get(registry.getProperty(property));
        if (of != null) {
          of.add(property.substring("alias.".length()));
        }
      }
    }
    return names;
  }

  /** The Spark spelling of the registry's option {@code name} (checked to exist). */
  static String name(String name) {
    return names(name).get(0);
  }

  /** {@code name} and its other names (aliases), as the registry lists them. */
  static List<String> names(String name) {
    List<String> found = NAMES.get(name.toLowerCase(Locale.ROOT));
    if (found == null) {
      throw new IllegalStateException("lance_spark's option registry has no option " + name);
    }
    return found;
  }

  /** Whether {@code value} is true as the Python parser reads a boolean option. */
  static boolean isTrue(String value) {
    return value != null && TRUE_WORDS.contains(value.trim().toLowerCase(Locale.ROOT));
  }

  /** The value of option {@code name} (or one of its aliases) in case-insensitive {@code options}. */
  static String get(Map<String, String> options, String name) {
    for (String candidate : names(name)) {
      String value = options.get(candidate);
      if (value != null) {
        return value;
      }
    }
    return null;
  }
}
