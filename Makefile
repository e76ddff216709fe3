# `make run`  : create the pinned environment (once, PyTorch; another framework when ARGS names it) and run the local pipeline.
# `make test` : create the pinned environment with the cloud and test extras (once) and run the test suite.
# `make test-fast`: the same without the tests that start long-lived processes or take half a second or more (markers e2e, slow).
# Every version, transitive ones included, is pinned in constraints.txt; re-running installs nothing new. Bytecode: pip
# installs with --no-compile and `compileall -j 0` then compiles the environment on every core at once (pip compiles one
# file after another). Without .pyc files every process compiles each module it imports from source again: the emulated
# hosts start from the DLC images' environment, which sets PYTHONDONTWRITEBYTECODE=1 (as many CI machines do), so nothing
# they import is ever cached, and `import torch` took 6-7 s of CPU instead of 2-3 (the README's Ray run 529 s -> 236 s).
# Files some packages ship that are not Python 3 (templates, test fixtures) fail to compile: that exit status is ignored.
# The packages' own test folders (tests/, test/: 55 of the 554 MB of .py) are left out: nothing here imports them.
VENV   ?= .venv
PY     := $(VENV)/bin/python
HASH   := $(shell cat pyproject.toml constraints.txt | cksum | cut -d' ' -f1)
COMPILE = $(PY) -m compileall -q -j 0 -x '/tests?/' "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" >/dev/null || true
ARGS   ?=
# pytest-xdist: one worker per core (at most 4); the fault tests with 3-5 s silence windows run first, on one worker, with no
# other cluster beside them, then the other cluster tests spread over every worker, a module at a time (tests/conftest.py
# pytest_xdist_make_scheduler); the rest spread. PARALLEL= runs serially.
PARALLEL ?= -n auto --maxprocesses 4

# `make run` installs PyTorch (the default framework) and, when ARGS names another (--framework tensorflow|ray), that one
FRAMEWORK_EXTRAS := $(if $(findstring tensorflow,$(ARGS)),tensorflow) $(if $(findstring ray,$(ARGS)),ray)

.PHONY: setup setup-all run test test-fast lint bench network-tools
setup: $(VENV)/.installed-base-$(HASH)
setup-all: $(VENV)/.installed-all-$(HASH)

$(VENV)/.installed-base-$(HASH): pyproject.toml constraints.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-compile -c constraints.txt -e .
	$(COMPILE)
	rm -f $(VENV)/.installed-base-*
	touch $@

# one framework extra (tensorflow, ray) on top of the base set
$(VENV)/.installed-%-$(HASH): $(VENV)/.installed-base-$(HASH)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-compile -c constraints.txt -e '.[$*]'
	$(COMPILE)
	rm -f $(VENV)/.installed-$*-*
	touch $@

$(VENV)/.installed-all-$(HASH): pyproject.toml constraints.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-compile -c constraints.txt -e '.[tensorflow,ray,serve,cloud,dev]'
	$(COMPILE)
	rm -f $(VENV)/.installed-*
	touch $@ $(VENV)/.installed-base-$(HASH) $(VENV)/.installed-tensorflow-$(HASH) $(VENV)/.installed-ray-$(HASH)

run: setup $(foreach extra,$(strip $(FRAMEWORK_EXTRAS)),$(VENV)/.installed-$(extra)-$(HASH))
	$(VENV)/bin/hetero run $(ARGS)

# the pinned CDK CLI (package-lock.json), for the `npx cdk synth` test; re-run only when the lock file changes
node_modules/.package-lock.json: package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

# nft and iptables (nftables backend) for the network-fault tests and bench cells (pipeline/emulator/links.py): installed from
# Debian once, as root; without them (or root) those tests skip, saying why
NETWORK_TOOLS := nftables=1.0.6-2+deb12u2 iptables=1.8.9-2
network-tools:
	@command -v nft >/dev/null && command -v iptables >/dev/null || { \
	  if [ "$$(id -u)" != 0 ]; then echo "network faults: nft/iptables missing and not root: their tests skip"; \
	  else apt-get install -y -q $(NETWORK_TOOLS) >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1; \
	    apt-get install -y -q $(NETWORK_TOOLS) >/dev/null 2>&1 || apt-get install -y -q nftables iptables >/dev/null; }; fi; }

# lint first: ruff (lint + format, pyproject.toml), the import contracts (lint-imports, pyproject.toml) and the types
# of steps/ and pipeline/ (mypy, [tool.mypy] in pyproject.toml). mypy rather than pyright: its cache (.mypy_cache)
# re-checks only what changed (about 2 s; 20-30 s from cold on two cores) where pyright analyses torch and everything
# else on every run (about 75 s), and it installs from PyPI as one pinned wheel with no Node.js runtime
lint: setup-all
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

# PYTHONDONTWRITEBYTECODE= (empty: unset for Python): pytest keeps each test module as it rewrote its asserts, and Python
# the project's own modules, in __pycache__ (both skipped where the machine sets it, as many CI machines do: every
# collection then parsed, rewrote and compiled all 190 test modules again, about 3 s of each worker's CPU). The emulated
# hosts are unaffected: they start from their image's environment (pipeline/emulator/container_env.py)
PYTEST := PYTHONDONTWRITEBYTECODE= $(VENV)/bin/python -m pytest

test: lint node_modules/.package-lock.json network-tools
	$(PYTEST) $(PARALLEL) $(ARGS)

# the inner loop: everything but the tests that start long-lived processes (marker e2e: clusters, pipelines, servers, the
# CDK CLI) and those that take half a second or more (marker slow: timeouts waited out, processes started, compiles)
test-fast: lint node_modules/.package-lock.json
	$(PYTEST) $(PARALLEL) -m "not e2e and not slow" $(ARGS)

bench: setup
	$(PY) bench/transport.py
	$(PY) bench/hetero_speedup.py
