# twophase: `make demo` and `make test` work on a fresh machine with Python 3.11, JDK 17, Maven, Go and Node.js.
# Heavy caches live outside the repository and are reused by every clone: ~/.cache/twophase
# (override with TWOPHASE_CACHE) for Kafka's and Spark's jars, the MinIO and fake-gcs-server binaries and Azurite, plus ~/.m2,
# Go's and pip's own caches. Nothing is downloaded or built twice.

PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.twophase-installed
PYTEST_ARGS ?=
# mypy's caches are reused by every clone too (it checks each file's hash, not its path or mtime):
# a fresh clone's `make lint` takes seconds instead of about a minute
TWOPHASE_CACHE ?= $(HOME)/.cache/twophase
MYPY_CACHE := $(TWOPHASE_CACHE)/mypy

.DEFAULT_GOAL := help
.PHONY: help venv constraints prepare jars demo demo-cluster test lint docs format services-up services-down services-status bench soak chaos faults model-check compat clean

help:
	@echo "make demo           end-to-end smoke run against Kafka and S3 (starts and stops them)"
	@echo "make demo-cluster   the demo on a Spark standalone cluster (2 workers), everything on S3"
	@echo "make demo-cluster-packed  the same with spark-submit and a venv-pack environment (--archives)"
	@echo "make test           lint, docs, then pytest tests (starts services on demand)"
	@echo "make lint           ruff check, ruff format --check, mypy --strict on every package"
	@echo "make docs           the documentation site (MkDocs, strict) into build/site"
	@echo "make services-up    run Kafka and MinIO in the background for development"
	@echo "make services-down  stop them"
	@echo "make bench / chaos  benchmarks / failure-injection suite"
	@echo "make faults         service faults: 3-broker Kafka cluster and MinIO killed, paused, restarted"
	@echo "make soak           the 2-hour soak: cost over time (BENCHMARKS.md)"
	@echo "make model-check    the model-based protocol test at length (thousands of random job lives)"
	@echo "make compat         the compatibility subset on Spark 3.5-4.3 x Python 3.10-3.13 (COMPAT.md)"

# the virtualenv, with the exact development versions of constraints.txt; pip runs again only when
# setup.cfg, pyproject.toml or constraints.txt changed
CONSTRAINTS := constraints.txt
venv: $(STAMP)
$(STAMP): setup.cfg setup.py pyproject.toml $(CONSTRAINTS)
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; install Python 3.11" >&2; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) -e '.[dev]'
	touch $@

# the development environment's exact versions, after a deliberate upgrade inside the ranges
constraints: venv
	{ sed -n '/^#/p' $(CONSTRAINTS); $(BIN)/python -m pip freeze --exclude-editable; } > $(CONSTRAINTS).new
	mv $(CONSTRAINTS).new $(CONSTRAINTS)

# Kafka's and Spark's jars (Maven) and the MinIO binary (go install); each step is skipped when cached
prepare: venv jars
	$(BIN)/twophase services prepare

# the jars the wheel carries (setup.py JVM_PROJECTS), built into the checkout for the editable
# install: the JVM halves of the S3, Kafka and Iceberg sinks' Spark-staged writes; never committed
STAGING_JARS := connectors/s3/jvm/twophase-s3-staging.jar connectors/kafka/jvm/twophase-kafka-staging.jar \
	connectors/iceberg/jvm/twophase-iceberg-staging.jar
JVM_SOURCES := $(wildcard connectors/*/jvm/pom.xml connectors/*/jvm/src/main/java/twophase/*/*.java)
jars: $(STAGING_JARS)
$(STAGING_JARS) &: $(JVM_SOURCES) setup.py
	$(BIN)/python -c 'import setup; setup.build_jars_in_place()'

demo: prepare
	$(BIN)/twophase demo

# the flights job on a Spark standalone cluster (issue #17), from nothing: MinIO, Kafka and a master
# with two workers for this run only (a private run dir: a developer's `services up` is neither
# reused nor stopped), the run with everything an executor needs on S3, `verify`, then stop
DEMO_CLUSTER_ARGS ?=
demo-cluster: prepare
	@run=$$(mktemp -d -t twophase-demo-cluster-XXXXXX); export TWOPHASE_RUN_DIR="$$run/services"; \
	trap '$(BIN)/twophase services down; rm -rf "$$run"' EXIT; start=$$(date +%s); \
	$(BIN)/twophase services up --spark-cluster \
	&& $(BIN)/twophase demo --spark-cluster --work-dir "$$run/flights" $(DEMO_CLUSTER_ARGS) \
	&& $(BIN)/twophase verify --work-dir "$$run/flights"; \
	status=$$?; echo "demo-cluster: exit status $$status, wall time $$(( $$(date +%s) - start )) s"; \
	exit $$status

# the flights job on the standalone cluster as a user submits it: the executors' Python is
# `twophase package env --extra flights --development` (venv-pack, no pyspark: the cluster's Spark
# provides it; the development wheel, since the driver runs the flights job from the archive)
# shipped with --archives env.tar.gz#environment, Spark's jars on the class path (none copied to
# the workers); spark-submit runs the driver on the same archive unpacked as ./environment.
# Scratch (archive, unpacked environments, the cluster's folders) under build/, not /tmp.
.PHONY: demo-cluster-packed
DEMO_PACKED_ARGS ?=
demo-cluster-packed: prepare
	@mkdir -p build; run=$$(mktemp -d "$$PWD/build/demo-cluster-packed-XXXXXX"); \
	export TWOPHASE_RUN_DIR="$$run/services"; \
	trap '$(BIN)/twophase services down; rm -rf "$$run"' EXIT; start=$$(date +%s); \
	$(BIN)/twophase services up --spark-cluster \
	&& $(BIN)/twophase package env --extra flights --development -o "$$run/env.tar.gz" \
	&& $(BIN)/python -m twophase.integration.jobs.flights_submit submit --archive "$$run/env.tar.gz" \
		--work-dir "$$run/flights" $(DEMO_PACKED_ARGS) \
	&& $(BIN)/twophase verify --work-dir "$$run/flights"; \
	status=$$?; echo "demo-cluster-packed: exit status $$status, wall time $$(( $$(date +%s) - start )) s"; \
	exit $$status

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	@mkdir -p build/typecheck && ln -sfn ../.. build/typecheck/twophase
	$(BIN)/mypy --cache-dir $(MYPY_CACHE)/packages
	# the test suites are no package of twophase: checked as files
	# (tests/ mirrors the code's folders); the autoload folder holds the module Spark's lookup imports
	MYPYPATH=tests:coordinator/spark/autoload $(BIN)/mypy --cache-dir $(MYPY_CACHE)/tests --explicit-package-bases tests

# DESIGN.md's walk of one committable, generated from the trace of one committable on the driver
# (tests/coordinator/test_committable_trace.py, which fails when DESIGN.md's differs)
.PHONY: design-walk
design-walk: venv
	TWOPHASE_WRITE_WALK=1 $(BIN)/pytest -q -p no:cacheprovider tests/coordinator/test_committable_trace.py -k design_md

# the documentation site (mkdocs.yml, docs/) into build/site; strict: a warning, such as a broken link
# or cross-reference, fails the build. mkdocstrings reads the sources of `twophase` (the repository
# root, setup.cfg package_dir) without importing them, through build/docs/twophase: one link per
# product package rather than one to the root as for mypy, since griffe follows links and would
# walk .venv and build/ too
DOCS_PACKAGES := __init__.py sinks coordinator connectors integration
docs: venv
	@mkdir -p build/docs/twophase && for p in $(DOCS_PACKAGES); do ln -sfn ../../../$$p build/docs/twophase/$$p; done
	$(BIN)/mkdocs build --strict -d build/site

format: venv
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# the long service-fault cases (marker faults_long) run in `make faults` / `make chaos` instead
test: lint docs prepare
	$(BIN)/pytest tests -m "not faults_long and not long" --durations=60 $(PYTEST_ARGS)

services-up: prepare
	$(BIN)/twophase services up

services-down: venv
	$(BIN)/twophase services down

services-status: venv
	$(BIN)/twophase services status

bench: prepare
	$(BIN)/python -m benchmarks.run

# the chaos matrix: trials of the flights job round-robin over its configurations
# (integration/chaos/matrix.py), seeded; the report goes to build/chaos-report.md and its tables
# into CHAOS.md. Its quick subset (pytest marker `chaos`) runs first, with the other `long` job-level cases.
# The cluster configuration (issue #17) runs apart, on a native standalone cluster of two workers.
CHAOS_TRIALS ?= 300
CHAOS_CLUSTER_TRIALS ?= 40
CHAOS_ZOMBIE_TRIALS ?= 8
CHAOS_SECURED_TRIALS ?= 30
CHAOS_FIVE_TRIALS ?= 50
CHAOS_SPECULATION_TRIALS ?= 20
CHAOS_EXPIRY_TRIALS ?= 20
CHAOS_PUBLISH_TRIALS ?= 20
CHAOS_UNMARKED_TRIALS ?= 100
CHAOS_TWO_DRIVERS_TRIALS ?= 50
chaos: prepare
	$(BIN)/pytest -m long tests $(PYTEST_ARGS)
	$(BIN)/python -m twophase.integration.chaos.run --trials $(CHAOS_TRIALS) --report build/chaos-report.md
	$(BIN)/python -m twophase.integration.chaos.run --configs cluster --trials $(CHAOS_CLUSTER_TRIALS) \
		--report build/chaos-cluster-report.md
	$(BIN)/python -m twophase.integration.chaos.run --configs cluster4 --trials $(CHAOS_ZOMBIE_TRIALS) \
		--report build/chaos-cluster4-report.md
	$(BIN)/python -m twophase.integration.chaos.run --configs cluster4z --trials $(CHAOS_SPECULATION_TRIALS) \
		--report build/chaos-cluster4z-report.md
	$(BIN)/python -m twophase.integration.chaos.run --configs secured --trials $(CHAOS_SECURED_TRIALS) --days 6 \
		--files-per-trigger 3 --report build/chaos-secured-report.md
	$(BIN)/python -m twophase.integration.chaos.run --configs five --trials $(CHAOS_FIVE_TRIALS) --days 14 \
		--files-per-trigger 7 --report build/chaos-five-report.md
	$(BIN)/python -m twophase.integration.chaos.run --configs expiry --trials $(CHAOS_EXPIRY_TRIALS) \
		--report build/chaos-expiry-report.md
	$(BIN)/python -m twophase.integration.chaos.run --configs publish --trials $(CHAOS_PUBLISH_TRIALS) \
		--report build/chaos-publish-report.md
	$(BIN)/python -m twophase.integration.chaos.run --configs unmarked --trials $(CHAOS_UNMARKED_TRIALS) \
		--report build/chaos-unmarked-report.md
	$(BIN)/python -m twophase.integration.chaos.run --configs two-drivers --trials $(CHAOS_TWO_DRIVERS_TRIALS) \
		--report build/chaos-two-drivers-report.md
	$(BIN)/python -m twophase.integration.chaos.run --configs yarn --trials 30 --days 6 --files-per-trigger 3 \
		--report build/chaos-yarn-report.md
	$(BIN)/python -m twophase.integration.chaos.run --configs azure --trials 30 --days 4 --files-per-trigger 2 \
		--seed 46 --report build/chaos-azure-report.md
	$(BIN)/python -m twophase.integration.chaos.run --configs gcs --trials 30 --days 4 --files-per-trigger 2 \
		--seed 46 --report build/chaos-gcs-report.md
	$(MAKE) faults

# every service-fault case (issue #16) against a native three-broker Kafka cluster and MinIO;
# one line per case (moment, restarts, time to recover) in build/faults-report.jsonl
faults: prepare
	$(BIN)/pytest -m faults tests/integration/faults $(PYTEST_ARGS)

# the soak (issues #29 item 5, #44 item 5): the flights job's sinks on an endless rate stream in 64
# partitions for 2 hours (or 5,000 epochs), checkpoints and the Delta table on S3, the driver killed
# (kill -9) halfway and restored from its s3:// checkpoint, sampled every minute, the table
# maintained every 10 minutes (OPTIMIZE, VACUUM, log cleanup) at Delta's default retention (7 days
# of removed files, 30 days of log: what a production table keeps, so growth that scales with
# retention shows). Fails (exit 1) naming each figure whose slope is above its threshold
# (benchmarks/soak_fit.py) and each sink not read back exactly; samples, result, plot, table in build/soak
SOAK_ARGS ?= --maintain-every-min 10
soak: prepare
	$(BIN)/twophase services up
	$(BIN)/python -m benchmarks.soak --out build/soak $(SOAK_ARGS)

# the model-based tests at length: the whole protocol (tests/coordinator/test_protocol_model.py)
# and two drivers of one job at once (test_two_drivers_model.py, #43): the fixed (derandomized)
# examples, then each seed (two fixed, one drawn from the clock and printed): 4 x 5,000 = 20,000
# examples of each; `make test` runs 30 fixed examples of each
MODEL_EXAMPLES ?= 5000
MODEL_SEEDS ?= 1 2 $(shell date +%s)
MODEL_TESTS ?= tests/coordinator/test_protocol_model.py tests/coordinator/test_two_drivers_model.py tests/connectors/s3/test_staged_write_model.py
model-check: venv
	TWOPHASE_MODEL_EXAMPLES=$(MODEL_EXAMPLES) $(BIN)/pytest $(MODEL_TESTS) -q -p no:cacheprovider --hypothesis-show-statistics
	for seed in $(MODEL_SEEDS); do \
	  echo "model-check: seed $$seed"; \
	  TWOPHASE_MODEL_SEED=$$seed TWOPHASE_MODEL_EXAMPLES=$(MODEL_EXAMPLES) $(BIN)/pytest $(MODEL_TESTS) -q -p no:cacheprovider --hypothesis-show-statistics || exit 1; \
	done

# the compatibility subset (tests marked compat) in a fresh venv per Spark × Python cell
# (integration/compat/cells.py), against one Kafka and MinIO; the table goes to COMPAT.md.
# `make test` runs the development cell (constraints.txt) only. COMPAT_ARGS="--cells a,b" picks cells.
COMPAT_ARGS ?=
compat: prepare
	$(BIN)/python -m twophase.integration.compat.run $(COMPAT_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
