# `make run`  : create the pinned environment (once) and run the local pipeline.
# `make test` : create the pinned environment (once) and run the test suite.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml constraints.txt | cksum | cut -d' ' -f1)
ARGS   ?=

.PHONY: setup run test bench
setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev]'
	rm -f $(VENV)/.installed-*
	touch $@

run: $(STAMP)
	$(VENV)/bin/hetero run $(ARGS)

test: $(STAMP)
	$(VENV)/bin/python -m pytest $(ARGS)

bench: $(STAMP)
	$(PY) bench/transport.py
	$(PY) bench/hetero_speedup.py
