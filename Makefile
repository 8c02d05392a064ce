# The README's commands. Everything installs into .venv from setup.cfg.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=
BROKER_ARGS ?=
# The pyspark of .venv: the wheel takes any supported one (setup.cfg: pyspark>=4.0,<5),
# the checkout develops on this one.
PYSPARK_VERSION := 4.2.0
# The other Spark lines CI proves (docs/reference/spark-versions.md, checked against this
# list by tests/project/test_spark_versions.py): each in a venv of its own,
# .cache/spark-<line>/ (the project editable, with that pyspark and the test tools), and
# its Spark connector jars fetched for that line (spark_chkpt/runtime/spark_version.py).
OTHER_PYSPARK_VERSIONS := 4.0.5 4.1.4 4.3.0
SPARK_LINE_VENVS := $(foreach v,$(OTHER_PYSPARK_VERSIONS),.cache/spark-$(basename $(v))/.installed)

.PHONY: setup test unit demo bench quix lint format broker connect-server clean docs docs-serve docs-shots wheel spark-lines test-ready

# The JVM artifacts (jvm/*/pom.xml) are fetched with mvn into .cache/jars once; a second
# `make setup` finds them there and fetches nothing. Each venv's pyspark.zip gets its
# bytecode (spark_chkpt/runtime/worker_bytecode.py): every Python process Spark starts
# imports pyspark from that zip, and compiled it anew without (about 0.55 CPU-s each).
setup: $(STAMP)
	$(BIN)/python -m spark_chkpt.runtime.jars fetch

$(STAMP): setup.cfg pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "Python >= 3.10 is required")'
	@command -v java >/dev/null || { echo "Java 17 is required (java not on PATH)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade --quiet pip
	$(BIN)/python -m pip install --quiet -e '.[dev,docs]' 'pyspark==$(PYSPARK_VERSION)'
	$(BIN)/python -m spark_chkpt.runtime.worker_bytecode
	@touch $(STAMP)

# One venv per other Spark line (OTHER_PYSPARK_VERSIONS), built once and kept in .cache:
# that pyspark alone (pip --no-deps; every line requires the same py4j), in front of
# .venv's packages (the project, editable, its dependencies and the test tools), which a
# .pth file adds behind it, and the project's console scripts on its Python. A line costs
# the unpacking of one pyspark, not a second install of everything; its Spark connector
# jars are fetched for that line.
PURELIB := import sysconfig; print(sysconfig.get_path("purelib"))

spark-lines: $(SPARK_LINE_VENVS)

.cache/spark-%/.installed: $(STAMP)
	rm -rf .cache/spark-$*
	$(PYTHON) -m venv --without-pip .cache/spark-$*
	$(BIN)/python -m pip --python .cache/spark-$*/bin/python install --quiet --no-deps \
	  'pyspark==$(filter $*.%,$(OTHER_PYSPARK_VERSIONS))'
	echo "import site; site.addsitedir('$$($(BIN)/python -c '$(PURELIB)')')" \
	  > "$$(.cache/spark-$*/bin/python -c '$(PURELIB)')/spark_chkpt_dev.pth"
	for script in $(BIN)/spark-chkpt*; do \
	  sed "1s|.*|#!$(CURDIR)/.cache/spark-$*/bin/python|" $$script > .cache/spark-$*/bin/$${script##*/}; \
	  chmod +x .cache/spark-$*/bin/$${script##*/}; \
	done
	.cache/spark-$*/bin/python -m spark_chkpt.runtime.jars fetch --set spark-connectors
	.cache/spark-$*/bin/python -m spark_chkpt.runtime.worker_bytecode
	@touch $@

# The whole suite on each format's default client (the source on kafka-python, the
# sink on librdkafka) in the first pass; beside it, in one process of its own with its
# own broker and SparkSession (its output printed after the first pass), the second pass:
# the source's and the sink's Spark tests again with each format on its other client: the
# source on confluent-kafka, the sink on kafka-python
# (SPARK_CHKPT_KAFKA_SOURCE_CLIENT / SPARK_CHKPT_KAFKA_SINK_CLIENT; tests that set
# kafka.client keep theirs). Not niced: its alignment tests have deadlines. After the
# first pass it left one core idle for a minute and a half (86 s in the CI of 53aa944).
# Both passes run on the real Kafka broker (tests/conftest.py); SPARK_CHKPT_TEST_BROKER=tansu
# runs them on Tansu instead (docs/reference/brokers.md).
# Partition growth too (test_topic_growth.py): running queries whose topics grow, on each
# client; a pooled consumer that read the topic before it grew failed on each client in
# turn (librdkafka "Unknown partition", kafka-python KeyError, issue 35).
# The modules marked other_clients (pytestmark) run in the second pass.
OTHER_CLIENT_TESTS := -m other_clients

# Two pytest-xdist workers, each with its own broker and SparkSession (session fixtures),
# a test file per worker at a time (a module's fixtures are built once): the kill chains
# and Spark tests mostly wait on JVM starts and triggers, so two fit the 2-core machine
# (about half the serial time). Files go out in collection order (--no-loadscope-reorder),
# which tests/conftest.py sorts by kind, so the few long kill chains (marked fault) start
# first: xdist's default order, most tests first, left them to the end on one worker
# while the other sat idle. PYTEST_WORKERS=0 runs in one process.
PYTEST_WORKERS ?= 2
XDIST := $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder)

# Each pass writes every test's seconds to .cache/test-times/ (tests/conftest.py) and prints
# them summed by kind and module; .ci/run keeps CI's copy (docs/contributing.md).
TIMES := .cache/test-times

# The first pass runs every test, among them the kill -9 chains of each other Spark line
# (OTHER_PYSPARK_VERSIONS): tests/chains/test_spark_lines.py runs the README's Kafka ->
# Delta and Kafka -> Kafka scripts and a DeltaUpsert job with each line's interpreter
# (.cache/spark-<line>/bin/python), each test a unit of work of its own beside the rest
# (tests/conftest.py, SPLIT_BY_TEST). Beside the first pass (in the background, niced, its
# output printed after it), each line's venv runs the unit tests of the code that asks
# which Spark runs (the runtime, the source's planning and options), in one process: they
# start no JVM, and a minute of one core after the passes left the other core idle. Then,
# in the same background run (not niced: a kill chain with its deadlines), the newest
# line's Spark Connect chain. The rest of the unit suite imports no
# pyspark API that differs between lines; it runs on .venv's line in the first pass.
# Every Spark JVM of the suite starts with C1 only, the serial collector and a class-data
# sharing archive of .venv's Spark classes (tests/conftest.py, spark_chkpt/testing/jvm.py);
# another line's JVM finds the archive not its own and starts without it.
# The lines' unit tests leave out test_teardown.py: twelve runs of a script that reads a
# table with delta-rs, where Spark plays no part (11 s a line).
SPARK_LINE_TESTS := -m unit tests/runtime tests/kafka/source --ignore=tests/runtime/test_teardown.py
# And on the newest line, the Spark Connect chain (marker newest_line): Kafka -> Delta, the
# barrier sink and DeltaUpsert over a Connect server of that Spark, through its kill -9.
NEWEST_PYSPARK_VERSION := $(lastword $(OTHER_PYSPARK_VERSIONS))
NEWEST_LINE_TESTS := -m newest_line tests/chains/test_spark_connect.py

# What the test passes need beyond setup: the other lines' venvs (mostly unpacking and
# fetching, one line after the other: Maven's local repository takes no two fetches at
# once) and, beside them, the class archive of the suite's JVMs (a Spark session's start
# and exit, about 35 s: spark_chkpt/testing/jvm.py), instead of the first pass recording
# the archive while both its workers wait.
test-ready: setup
	set -e; $(BIN)/python -m spark_chkpt.testing.jvm .cache/cds & record=$$!; \
	  $(MAKE) spark-lines; wait $$record

test: test-ready
	mkdir -p $(TIMES); \
	( set -e; for v in $(OTHER_PYSPARK_VERSIONS); do \
	    SPARK_CHKPT_TEST_TIMES=$(TIMES)/spark-$${v%.*}.json nice -n 10 \
	    .cache/spark-$${v%.*}/bin/python -m pytest $(SPARK_LINE_TESTS) $(PYTEST_ARGS); \
	  done; \
	  v=$(NEWEST_PYSPARK_VERSION); SPARK_CHKPT_TEST_TIMES=$(TIMES)/connect-$${v%.*}.json \
	    SPARK_CHKPT_TEST_JVM=no-archive \
	    .cache/spark-$${v%.*}/bin/python -m pytest $(NEWEST_LINE_TESTS) $(PYTEST_ARGS) \
	) > $(TIMES)/spark-lines.log 2>&1 & lines=$$!; \
	SPARK_CHKPT_KAFKA_SOURCE_CLIENT=confluent SPARK_CHKPT_KAFKA_SINK_CLIENT=kafka-python \
	  SPARK_CHKPT_TEST_TIMES=$(TIMES)/second.json \
	  $(BIN)/python -m pytest $(OTHER_CLIENT_TESTS) $(PYTEST_ARGS) \
	  > $(TIMES)/second.log 2>&1 & second=$$!; \
	SPARK_CHKPT_TEST_TIMES=$(TIMES)/first.json \
	  $(BIN)/python -m pytest $(XDIST) $(PYTEST_ARGS); first=$$?; \
	wait $$second; second_exit=$$?; wait $$lines; lines_exit=$$?; \
	echo "== beside the first pass: the second pass, on the other Kafka clients (exit $$second_exit) =="; \
	cat $(TIMES)/second.log; \
	echo "== beside the first pass: the other Spark lines' unit tests, then Connect on $(NEWEST_PYSPARK_VERSION) (exit $$lines_exit) =="; \
	cat $(TIMES)/spark-lines.log; \
	[ $$first -eq 0 ] && [ $$second_exit -eq 0 ] && [ $$lines_exit -eq 0 ]

unit: setup
	$(BIN)/python -m pytest -m unit $(PYTEST_ARGS)

demo: setup
	$(BIN)/python -m spark_chkpt.jobs.demo

# Quix Streams, the bench's exactly-once comparison (bench/quix.py), in a venv of its own:
# it pins confluent-kafka below 2.13, the project's .venv has a newer one. The version is
# the bench extra's in setup.cfg. `make bench` builds it and passes it.
QUIX := .cache/quix
QUIX_SPEC = $(shell $(PYTHON) -c 'import configparser as c; p = c.ConfigParser(); p.read("setup.cfg"); print(next(l for l in p["options.extras_require"]["bench"].split() if l.startswith("quixstreams")))')

quix: $(QUIX)/bin/python

$(QUIX)/bin/python: setup.cfg
	test -x $(QUIX)/bin/python || $(PYTHON) -m venv $(QUIX)
	$(QUIX)/bin/python -m pip install --quiet '$(QUIX_SPEC)'
	@touch $(QUIX)/bin/python

# The main rows (about 8 minutes on the 2-core machine), then the rows of how cost grows
# with age, partitions and shape (bench/growth.py, about 20 minutes more);
# BENCH_ARGS=--core runs the main rows alone.
bench: setup quix
	$(BIN)/python -m bench --quix-python $(QUIX)/bin/python $(BENCH_ARGS)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy spark_chkpt connectors jobs bench conf

format: setup
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# Tansu by default; BROKER_ARGS=--kafka runs the real Kafka broker (docs/reference/brokers.md).
broker: setup
	$(BIN)/spark-chkpt broker $(BROKER_ARGS)

# A local Spark Connect server with the project's jars, in the foreground (port 15002;
# CONNECT_ARGS=--print-command prints its spark-submit command): docs/how-to/spark-connect.md
connect-server: setup
	$(BIN)/python -m spark_chkpt.testing.connect_server $(CONNECT_ARGS)

# Mermaid's runtime, served with the site: mkdocs-material otherwise loads it from
# unpkg.com when a page is viewed, and where that is unreachable the drawings stay code.
# Fetched with npm once into .cache/npm (git-ignored); without npm the site falls back
# to unpkg.com.
MERMAID_VERSION := 11.12.0
MERMAID_JS := docs/javascripts/mermaid.min.js

$(MERMAID_JS):
	@mkdir -p .cache/npm $(dir $(MERMAID_JS))
	@if command -v npm >/dev/null && \
	  (cd .cache/npm && npm pack --silent mermaid@$(MERMAID_VERSION) >/dev/null) && \
	  tar -xzf .cache/npm/mermaid-$(MERMAID_VERSION).tgz -O package/dist/mermaid.min.js > $@.part; \
	then mv $@.part $@; \
	else rm -f $@.part; echo "Mermaid $(MERMAID_VERSION) not fetched (npm missing or offline): the site loads it from unpkg.com when viewed"; fi

# The docs site (mkdocs.yml, docs/): built into site/, strict, as CI builds it.
docs: setup $(MERMAID_JS)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

DOCS_PORT ?= 8000
docs-serve: setup $(MERMAID_JS)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --dev-addr 127.0.0.1:$(DOCS_PORT)

# Screenshots of the built site in headless Chromium (Debian's `chromium`), to look at
# the pages a reader sees: the start page, the options reference, a page of diagrams.
SHOTS_PORT ?= 8765
SHOT_PAGES := index:/ options:/reference/options/ barriers:/concepts/barriers/
docs-shots: docs
	@command -v chromium >/dev/null || { echo "chromium is required (apt-get install chromium)"; exit 1; }
	@mkdir -p site-shots
	@$(BIN)/python -m http.server $(SHOTS_PORT) --bind 127.0.0.1 --directory site >/dev/null 2>&1 & \
	  server=$$!; sleep 1; \
	  for page in $(SHOT_PAGES); do \
	    chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --virtual-time-budget=10000 \
	      --window-size=1280,1800 --screenshot=site-shots/$${page%%:*}.png \
	      http://127.0.0.1:$(SHOTS_PORT)$${page#*:} 2>/dev/null; \
	  done; kill $$server; ls site-shots

# The wheel users install (dist/), built with `build` in an isolated environment.
wheel: setup
	rm -rf dist
	$(BIN)/python -m build --wheel --outdir dist .

clean:
	rm -rf $(VENV) build dist site site-shots *.egg-info .pytest_cache .mypy_cache .ruff_cache
