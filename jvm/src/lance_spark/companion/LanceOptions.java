package lance_spark.companion;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;

/**
 * The options of the Python {@code lance} source the companion sets or reads, by the names
 * the Python registry declares ({@code lance_spark/source/options.py}, {@code OPTIONS}).
 *
 * <p>Implements no Spark interface. The registry generates {@code options.properties} (in
 * {@code jvm/resources}, packed into the jar; {@code tests/unit/test_options_registry.py}
 * fails when it and the registry differ): one line {@code option.<key>=<name>} an option, one
 * {@code alias.<key>=<key>} an other name, and the words a boolean option takes as true. A
 * name the companion asks for that the registry lacks fails the companion's class loading,
 * not a user's statement.
 */
final class LanceOptions {
  private static final Properties REGISTRY = load();

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

  /** The Spark spelling of the registry's option {@code name} (checked to exist). */
  static String name(String name) {
    String found = REGISTRY.getProperty("option." + name.toLowerCase(Locale.ROOT));
    if (found == null) {
      throw new IllegalStateException("lance_spark's option registry has no option " + name);
    }
    return found;
  }

  /** {@code name} and its other names (aliases), as the registry lists them. */
  static List<String> names(String name) {
    String key = name(name).toLowerCase(Locale.ROOT);
    List<String> all = new ArrayList<>(List.of(name(name)));
    for (Map.Entry<Object, Object> entry : REGISTRY.entrySet()) {
      String property = (String) entry.getKey();
      if (property.startsWith("alias.") && key.equals(entry.getValue())) {
        all.add(property.substring("alias.".length()));
      }
    }
    return all;
  }

  /** Whether {@code value} is true as the Python parser reads a boolean option. */
  static boolean isTrue(String value) {
    if (value == null) {
      return false;
    }
    String word = value.trim().toLowerCase(Locale.ROOT);
    return Arrays.asList(REGISTRY.getProperty("boolean.true", "true").split(",")).contains(word);
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
