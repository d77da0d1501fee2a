"""What a user runs after ``pip install lance_spark``: the README's quick start and the reuse
patterns that read too few rows without the JVM companion (SPARK-58551), with their counts.

    python _user_script.py register DIR   the README's way: a session, then lance_spark.register
    spark-submit ... _user_script.py submit DIR
                                          spark-submit with --conf from lance_spark.spark_conf(),
                                          which loads the companion before register runs
    python _user_script.py connect DIR URL
                                          a Spark Connect client of the server at URL (started
                                          with --conf from lance_spark.spark_conf()) that
                                          imports lance_spark only after the checks, to ask
                                          companion_enabled: format("lance") comes from the
                                          server's discovery of pyspark_lance

Copied out of the repository and run from there by tests/packaging/test_wheel_install.py, with
the new virtualenv's python. Prints one line ``RESULT {json}``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import platform
import sys
import warnings

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

mode, root = sys.argv[1], sys.argv[2]
caught: list[str] = []
warnings.showwarning = lambda message, *args, **kwargs: caught.append(str(message))

result: dict[str, object] = {"python": platform.python_version()}
if mode == "connect":
    # A Connect client that never imported lance_spark (until the end).
    spark = SparkSession.builder.remote(sys.argv[3]).getOrCreate()
else:
    import lance_spark

    if mode == "register":
        # The README's quick start, as written there.
        spark = SparkSession.builder.master("local[2]").getOrCreate()
    else:
        spark = SparkSession.builder.getOrCreate()  # spark-submit's session, its --conf included
        # Loaded by spark-submit's --conf (spark.jars, spark.sql.extensions), before register.
        result["companion_before_register"] = bool(lance_spark.companion_enabled(spark))
    lance_spark.register(spark)  # idempotent: a script calls it whatever started the session

uri = os.path.join(root, "pets.lance")
pets = spark.createDataFrame(
    [(1, "cat", [0.1, 0.2]), (2, "dog", [0.3, 0.4]), (3, "cat", [0.5, 0.6])],
    "id long, label string, embedding array<float>",
)
(
    pets.write.format("lance")
    .option("embedding.arrow.fixed-size-list.size", "2")
    .mode("overwrite")
    .save(uri)
)
spark.createDataFrame([(4, "bird", [0.7, 0.8])], pets.schema).write.format("lance").mode(
    "append"
).save(uri)
df = spark.read.format("lance").load(uri)
result["cats"] = sorted(r.id for r in df.filter("label = 'cat'").collect())
result["pets_after_filter"] = df.count()  # the same DataFrame, after a filtered query

# The reuse patterns, on 100 rows with k = id % 3. Without the companion (4.3) the count after
# the filtered query reads 33 rows, the self-join finds none.
nums = os.path.join(root, "nums.lance")
spark.range(100).withColumn("k", F.col("id") % 3).write.format("lance").mode("overwrite").save(nums)
t = spark.read.format("lance").load(nums)
result["k1"] = t.where("k = 1").count()
result["all_after_k1"] = t.count()
t.createOrReplaceTempView("nums")
result["view_k0"] = spark.sql("SELECT id FROM nums WHERE k = 0").count()
result["view_k1"] = spark.sql("SELECT id FROM nums WHERE k = 1").count()
a = t.where("k = 1").alias("a")
b = t.where("k = 2").alias("b")
result["self_join"] = a.join(b, F.col("a.id") + 1 == F.col("b.id")).count()
plan = io.StringIO()
with contextlib.redirect_stdout(plan):
    t.where("k = 1").explain()
result["explain_k1"] = plan.getvalue()  # the companion's scan names the filter Lance runs

result["imported_before_end"] = "lance_spark" in sys.modules
import lance_spark  # noqa: E402  (connect: only now)

jar_path = lance_spark._spark.companion_jar_path()  # companion_jar() raises without the jar
result |= {
    "lance_spark": lance_spark.__file__,
    "jar": jar_path,
    "jar_exists": os.path.isfile(jar_path),
    # Connect: the server's (its --conf), which is the same installation's jar here
    "spark_jars": spark.conf.get("spark.jars", ""),
}
result["companion_enabled"] = bool(lance_spark.companion_enabled(spark))
result["warnings"] = caught
print("RESULT " + json.dumps(result), flush=True)
spark.stop()
