# The two commands of the README:
#   make demo   set up .venv, then run the main job (federated DDG mean estimation)
#   make test   set up .venv, then run the whole test suite (slow tests included)
# and the core lane:
#   make test-core PYTHON=python3.12   set up .venv-core (today's stack, no
#               TFF), then run every test of the framework-free core
PYTHON ?=
VENV_PY := .venv/bin/python
CORE_PY := .venv-core/bin/python
PYTEST_ARGS ?=
# The suite runs on both cores (pytest-xdist): each worker process takes
# whole test modules, costliest first (tff_ddp_tests/conftest.py), sets up
# its own TFF test context and ends the TFF workers it started.
# `make test TEST_WORKERS=0` runs it in one process.
TEST_WORKERS ?= 2
TEST_PARALLEL := -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
# TensorFlow's C++ log lines (CUDA plugin registration, grappler) drown the
# reports; failures still surface as Python exceptions.
export TF_CPP_MIN_LOG_LEVEL ?= 3

.PHONY: setup setup-core setup-lint demo test test-fast test-core test-tooling bench lock lock-core lock-lint lint format clean bazel-test

setup:
	@PYTHON=$(PYTHON) bash scripts/setup_env.sh

# The core lane's environment: Python 3.12 (PYTHON, default python3.12) with
# requirements/lock-core.txt.
setup-core:
	@PYTHON=$(PYTHON) bash scripts/setup_env.sh core

# The lint tools (yapf, pylint, mypy) in .venv-lint, a virtual environment
# of their own pinned by requirements/lock-lint.txt: installing them into
# .venv would let their dependencies move the TFF lane's pins, and they
# need none of the package's dependencies (they read the source).
setup-lint:
	@bash scripts/setup_env.sh lint

# The formatter (yapf, Google's style in pyproject.toml) in check mode,
# pylint (.pylintrc) and mypy (pyproject.toml) over the typed core, and the
# design metrics against their ceilings (scripts/design_metrics.py --check);
# docs/development.md. `make format` rewrites what the check reports.
LINT_PY := .venv-lint/bin
FORMAT_PATHS := tff_ddp tff_ddp_tests benchmarks scripts setup.py
PYLINT_PATHS := tff_ddp
# The tests, benchmarks and scripts under the same rc, less three checks
# that flag their idioms: protected-access (tests and tools call the
# private helpers they check), cell-var-from-loop (benchmark and test
# lambdas are called within the iteration that defines them),
# redefined-outer-name (a test's local `rounds` or `run` beside a module of
# that name), consider-using-with (tests and tools start processes that
# outlive a block and end them by pid, as utils/processes does).
PYLINT_PERIPHERY := tff_ddp_tests benchmarks scripts setup.py
PYLINT_PERIPHERY_DISABLE := protected-access,cell-var-from-loop,redefined-outer-name,consider-using-with
MYPY_PATHS := tff_ddp/accounting tff_ddp/mechanisms
lint: setup-lint
	@status=0; \
	  $(LINT_PY)/yapf --quiet --recursive --parallel $(FORMAT_PATHS) || status=1; \
	  $(LINT_PY)/pylint --rcfile=.pylintrc $(PYLINT_PATHS) || status=1; \
	  $(LINT_PY)/pylint --rcfile=.pylintrc \
	    --disable=$(PYLINT_PERIPHERY_DISABLE) $(PYLINT_PERIPHERY) || status=1; \
	  $(LINT_PY)/mypy $(MYPY_PATHS) || status=1; \
	  $(LINT_PY)/python scripts/design_metrics.py --check || status=1; \
	  exit $$status

format: setup-lint
	$(LINT_PY)/yapf --in-place --recursive --parallel $(FORMAT_PATHS)

demo: setup
	$(VENV_PY) -m tff_ddp.cli demo

test: setup
	$(VENV_PY) -m pytest -q --run-slow $(TEST_PARALLEL) $(PYTEST_ARGS) tff_ddp_tests

# Everything but the tests marked slow.
test-fast: setup
	$(VENV_PY) -m pytest -q $(TEST_PARALLEL) $(PYTEST_ARGS) tff_ddp_tests

# The framework-free core (mechanisms, encoders, accounting) on today's
# stack, without TFF: the test modules of tff_ddp_tests that test the core
# (`--core`, tff_ddp_tests/conftest.py), slow tests included.
test-core: setup-core
	@$(CORE_PY) -m tff_ddp.utils.stack
	$(CORE_PY) -m pytest -q --run-slow --core $(TEST_PARALLEL) $(PYTEST_ARGS) tff_ddp_tests

# The tests of the tooling (scripts/: design metrics, suite profile, flake
# hunt; benchmarks/_harness.py): not the library's suite, so neither
# `make test` nor CI runs them.
test-tooling: setup
	$(VENV_PY) -m pytest -q $(PYTEST_ARGS) scripts/tests

bench: setup
	$(VENV_PY) benchmarks/ddg_vs_tff.py
	$(VENV_PY) benchmarks/ddg_encode_profile.py
	$(VENV_PY) benchmarks/model_scale.py
	$(VENV_PY) benchmarks/ddg_utility.py
	$(VENV_PY) benchmarks/accountant_bench.py
	$(VENV_PY) benchmarks/kashin_bench.py
	$(VENV_PY) benchmarks/dft_vs_hadamard.py
	$(VENV_PY) benchmarks/skellam_vs_ddg.py
	$(VENV_PY) benchmarks/cpbm_vs_ddg.py
	$(VENV_PY) benchmarks/quantiles_figure2.py --check
	$(VENV_PY) benchmarks/quantiles_vs_tff.py
	$(VENV_PY) benchmarks/quantile_estimators.py
	$(VENV_PY) benchmarks/quantiles_table5.py
	$(VENV_PY) benchmarks/frequency_table1.py

# Bazel over the framework-free core: builds and runs the core's py_tests
# with the generated BUILD files, offline (Debian's bazel-bootstrap 4.2.3,
# installed by scripts/install_bazel.sh; Bazel's native py rules; third-party
# packages from .venv through bazel/python3). A test whose BUILD deps miss a
# tff_ddp module it imports fails. docs/notes/bazel.md has the measurements.
# `make bazel-test BAZEL_TARGETS=//tff_ddp_tests/accounting:ddg_rdp_test`
# runs one test. In CI the Bazel server (a daemon of its own) is shut down
# after the run.
BAZEL_TARGETS ?= //tff_ddp_tests/accounting/... //tff_ddp_tests/mechanisms/... //tff_ddp_tests/encoders/...
BAZEL_ARGS ?=
bazel-test: setup
	@bash scripts/install_bazel.sh
	@status=0; bazel test $(BAZEL_ARGS) $(BAZEL_TARGETS) || status=$$?; \
	  if [ -n "$$CI" ]; then bazel shutdown; fi; exit $$status

# Write every Bazel BUILD file from the modules' imports (scripts/
# build_files.py; tff_ddp_tests/build_test.py fails until they are committed).
.PHONY: build-files
build-files: setup
	$(VENV_PY) scripts/build_files.py

# Re-resolve requirements/lock.txt (needs the registry).
lock:
	$(VENV_PY) -m uv pip compile requirements/requirements.in \
	  --override requirements/overrides.txt --python-version 3.11 \
	  --no-header -o requirements/lock.txt

# Re-resolve requirements/lock-core.txt for the core lane (Python 3.12).
lock-core:
	$(VENV_PY) -m uv pip compile requirements/core.in --python-version 3.12 \
	  --no-header -o requirements/lock-core.txt

# Re-resolve requirements/lock-lint.txt, the lint tools' pins.
lock-lint:
	$(VENV_PY) -m uv pip compile requirements/lint.in --python-version 3.11 \
	  --no-header -o requirements/lock-lint.txt

clean:
	rm -rf .venv .venv-core .venv-lint .mypy_cache build *.egg-info .pytest_cache
