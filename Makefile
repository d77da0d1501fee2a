# lance_spark — every target creates .venv and installs what it needs when missing.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
BENCH_ROWS ?= 5000000
BENCH_RUNS ?= 7
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))
export SPARK_CONF_DIR := $(abspath conf)

# The JVM companion (jvm/), compiled with javac against the pyspark wheel's jars.
JAR    := lance_spark/jars/lance-spark-companion.jar
JAVA_SOURCES := $(shell find jvm/src -name '*.java') $(shell find jvm/resources -type f)

.DEFAULT_GOAL := help
.PHONY: help demo bench bench-scale test test-quick test-unit lint docs clean java jdk venv jar dist

help: ## Show the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  make %-10s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

venv: $(STAMP) ## Create .venv and install the package with its dev and notebook tools

$(STAMP): pyproject.toml constraints.txt
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found; install Python 3.11 or run make PYTHON=/path/to/python3.11"; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@# compat: the checkout itself goes on sys.path, so Spark's discovery of pyspark_* modules
	@# (pkgutil.iter_modules: path entries only, not setuptools' editable finder) sees pyspark_lance
	@# constraints.txt: the exact versions the tests run on, within pyproject.toml's ranges
	$(PY) -m pip install --quiet -e ".[dev,docs,notebook]" -c constraints.txt --config-settings editable_mode=compat
	@touch $(STAMP)

java: ## Install OpenJDK 17 with apt-get when no JDK 17+ is on PATH (as root), then check
	@bash scripts/ensure-java.sh --install

# Checks only (never installs): the targets that build the jar run it first, before the venv.
jdk:
	@bash scripts/ensure-java.sh

jar: jdk $(JAR) ## Build the JVM companion jar (javac against the pyspark wheel's jars)

# Strict: javac's warnings are errors here (a user's wheel build is lenient, see jvm/build.sh).
$(JAR): $(STAMP) $(JAVA_SOURCES) jvm/build.sh
	@LANCE_SPARK_JAVAC_STRICT=1 bash jvm/build.sh $(PY) $@

dist: jdk $(STAMP) ## Build the sdist and the wheel (jar included) into dist/, as python -m build does
	$(PY) -m build --no-isolation --outdir dist .

demo: jdk $(STAMP) $(JAR) ## Run the walkthrough notebook ("a time machine with Lance") headless; prints its HTML copy
	$(PY) notebooks/run_notebook.py notebooks/time_machine.ipynb

bench: jdk $(STAMP) $(JAR) ## side-by-side benchmark against Parquet, then ML datasets at scale (writes BENCHMARKS.md)
	$(PY) -m benchmarks.run --rows $(BENCH_ROWS) --runs $(BENCH_RUNS) --out BENCHMARKS.md
	$(PY) -m benchmarks.ml_scale --out BENCHMARKS.md --cluster

bench-scale: jdk $(STAMP) $(JAR) ## many versions / fragments, compaction, worker memory (a section of BENCHMARKS.md)
	$(PY) -m benchmarks.scale --out BENCHMARKS.md

# Two workers (pytest-xdist), a file's tests on one of them: the tests spend much of their time
# waiting on JVMs and servers, so two share the 2 cores (each has its own sessions and servers).
test: jdk $(STAMP) $(JAR) ## Run every test: unit, Spark, standalone cluster and S3 (moto)
	$(PY) -m pytest -n 2 --dist loadfile --no-loadscope-reorder

test-quick: jdk $(STAMP) $(JAR) ## The development loop: the unit tests and one end-to-end smoke per area (tests/_quick.py)
	$(PY) -m pytest -m quick -q -p no:cacheprovider

test-unit: $(STAMP) ## Run the fast tests that need no JVM
	$(PY) -m pytest tests/unit

lint: $(STAMP) ## ruff and mypy
	$(VENV)/bin/ruff check lance_spark tests notebooks benchmarks build_backend
	$(VENV)/bin/ruff format --check lance_spark tests notebooks benchmarks build_backend
	$(VENV)/bin/mypy lance_spark benchmarks build_backend

docs: $(STAMP) ## Build the docs site strictly into site/ (a broken link or API reference fails)
	$(VENV)/bin/mkdocs build --strict --site-dir site

clean: ## Remove the venv, caches and generated data
	rm -rf $(VENV) $(dir $(JAR)) site .pytest_cache .mypy_cache .ruff_cache .hypothesis build dist *.egg-info spark-warehouse metastore_db derby.log data
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
