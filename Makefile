# Quickstart: `make demo` and `make test`. Each installs what it needs (idempotently) first.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# checkov pins its own dependency tree (boto3 among them), which cannot share the project's venv: it gets one of its own.
CHECKOV_VENV := .venv-checkov
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export PYTHONUNBUFFERED := 1

# Extra arguments for the ray-efa commands, e.g. make manifests ARGS="-c storagePath=s3://bucket/prefix"
ARGS ?=

.PHONY: install controlplane demo check check-tests test test-fast test-cluster test-mutations test-durations lint docs synth manifests plan train-local check-transport lock clean

install: $(VENV)/.installed $(VENV)/.editable node_modules/.installed $(CHECKOV_VENV)/.installed

$(VENV)/.installed: requirements.lock pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "== installing the Python tree (requirements.lock: torch, ray, aws-cdk-lib; several GB the first time)"
	$(PY) -m pip install --disable-pip-version-check --progress-bar on -r requirements.lock
	@touch $@

# ray_efa itself, editable in setuptools' strict mode: build/__editable__.ray_efa_stack-*/ holds a tree of links to the
# package's files (.../ray_efa/core/models.py -> <checkout>/ray_efa/core/models.py) and a .pth file puts that folder on
# the venv's path. So the venv imports exactly `ray_efa`, as the checkout's own files, from any folder (nothing else of
# the repository becomes importable), and a type checker or IDE reads it as it reads any folder on the path (the default
# mode's import-hook finder runs at import, which pyright, mypy and Pylance do not: docs/embedding.md,
# tests/test_wheel.py). An edit of a file shows at once; a module added, moved or removed needs the tree made again, so
# the stamp depends on $(VENV)/.package-files, the list of the package's files, rewritten only when that list changes.
$(VENV)/.editable: $(VENV)/.installed pyproject.toml $(VENV)/.package-files
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -e . --config-settings editable_mode=strict
	@touch $@

# The package's files as the wheel would hold them (ray_efa/ through its links), one a line; the file keeps its date
# while the list is the same, so that only a module added, moved or removed makes the editable install again.
$(VENV)/.package-files: FORCE
	@mkdir -p $(@D)
	@find -L ray_efa -name __pycache__ -prune -o -type f -print | LC_ALL=C sort > $@.new
	@if cmp -s $@.new $@; then rm $@.new; else mv $@.new $@; fi

FORCE:

$(CHECKOV_VENV)/.installed: requirements-checkov.lock
	@test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install -q --disable-pip-version-check -r requirements-checkov.lock
	@touch $@

node_modules/.installed: package.json package-lock.json
	@echo "== installing the pinned CDK CLI (npm ci)"
	npm ci --no-audit --no-fund --progress=true --loglevel=http
	@touch $@

## The main job: synthesize the whole stack, write the manifests, train on a local Ray cluster, gate the transport.
demo: install
	$(PY) -m ray_efa.cli demo $(ARGS)

synth: install
	npx cdk synth --quiet $(ARGS)

manifests: $(VENV)/.installed
	$(PY) -m ray_efa.cli manifests --out dist $(ARGS)

plan: $(VENV)/.installed
	$(PY) -m ray_efa.cli plan $(ARGS)

train-local: $(VENV)/.installed
	$(PY) -m ray_efa.cli train --local $(ARGS)

## The transport gate on NCCL logs: make check-transport LOGS="driver.log worker-*.out" [ARGS="--expect efa"]
check-transport: $(VENV)/.installed
	$(PY) -m ray_efa.cli check-transport $(ARGS) $(LOGS)

## The test control plane's binaries (etcd, kube-apiserver, the scheduler, the controller manager, KWOK, the KubeRay
## operator), built from the pinned Go modules in tools/controlplane/ into ~/.cache/ray-efa: minutes the first time on a
## machine, nothing after (docs/testing.md, "The control plane").
controlplane:
	$(PYTHON) tools/controlplane/build.py

## The PR tier, what to run before a commit: 7.5 minutes on 2 quiet cores (docs/test-runs.md). make lint and the
## tests of every mark but ray, spawn, wheel and cluster (the fast ones, the synth and k8s ones) side by side (-j2:
## pyright is one process, pytest two workers), then one Ray smoke run: `ray-efa train --local` on a real local Ray
## cluster, its table and the transport gate's verdict. make test runs everything.
RAY_SMOKE := tests/training/test_train_cli.py::test_local_run_trains_prints_the_table_and_passes_the_gate_honestly
check: $(VENV)/.installed $(VENV)/.editable node_modules/.installed
	$(MAKE) --no-print-directory -j2 --output-sync=target lint check-tests
	$(PY) -m pytest -n 0 $(RAY_SMOKE)

check-tests: $(VENV)/.installed $(VENV)/.editable
	$(PY) -m pytest -n 2 --dist loadgroup -m "not (ray or spawn or wheel or cluster)"

## The whole suite on 2 workers (docs/testing.md: what it runs, how long, how to time it).
test: install controlplane
	$(PY) -m pytest -n 2 --dist loadgroup

## The tests against the real control plane alone (tests/cluster and every other test marked cluster).
test-cluster: install controlplane
	$(PY) -m pytest -n 0 -m cluster

## The edit loop: the pure-Python tests, without the marks that take seconds a test (ray, synth, spawn, wheel).
test-fast: $(VENV)/.installed $(VENV)/.editable
	$(PY) -m pytest -n 2 --dist loadgroup -m "not (ray or synth or spawn or wheel or cluster)"

## The mutation check: each edit of tools/mutations.py (a realistic bug in training/, core/ or the gate) on a fresh
## copy of the tree must fail its tests; minutes, so not part of `make test` (docs/testing.md: what it found).
test-mutations: $(VENV)/.installed $(VENV)/.editable
	$(PY) tools/mutations.py

## The seconds each test took, for the longest-first order make test hands out (tests/scheduling.py): a full run
## that writes tests/durations.json when every test passes. Run it on a quiet machine after adding slow tests.
test-durations: install controlplane
	$(PY) -m pytest -n 2 --dist loadgroup --record-durations tests/durations.json

## Lint and type-check: ruff (pyproject [tool.ruff]), the layer contracts and no import cycle between the modules of a
## package (pyproject [tool.importlinter], acyclic_siblings among them; --no-cache: it writes nothing), the module
## boundaries (tools/module_boundaries.py: no private name across modules), no function over 80 lines
## (tools/function_length.py) and pyright (pyproject [tool.pyright]; the pinned one in node_modules, never a download). 0 findings, 0 broken contracts, 0 long functions
## and 0 pyright errors or warnings; CI runs it before `make test`.
lint: $(VENV)/.editable node_modules/.installed
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(VENV)/bin/lint-imports --no-cache --no-logo
	$(PY) tools/module_boundaries.py
	$(PY) tools/function_length.py
	npx --no-install pyright --warnings

## The reference as a site (mkdocs.yml, docs/): built strictly, so a broken link or anchor fails. Into site/.
## (NO_MKDOCS_2_WARNING: Material's end-of-life banner, which docs/development.md states once.)
docs: $(VENV)/.installed
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site
	@echo "== the site is in site/ (open site/index.html, or serve it live: $(VENV)/bin/mkdocs serve)"

## Re-pin the Python dependency tree after changing pyproject.toml (needs network).
lock:
	rm -rf /tmp/ray-efa-lock && $(PYTHON) -m venv /tmp/ray-efa-lock
	/tmp/ray-efa-lock/bin/pip install -q -e '.[train,plots,dev]'
	/tmp/ray-efa-lock/bin/pip freeze --exclude-editable --exclude ray-efa-stack | sort > requirements.lock
	rm -rf /tmp/ray-efa-lock-checkov && $(PYTHON) -m venv /tmp/ray-efa-lock-checkov
	/tmp/ray-efa-lock-checkov/bin/pip install -q checkov==$$(sed -n 's/^checkov==//p' requirements-checkov.lock)
	/tmp/ray-efa-lock-checkov/bin/pip freeze | sort > requirements-checkov.lock

clean:
	rm -rf cdk.out dist site .pytest_cache
