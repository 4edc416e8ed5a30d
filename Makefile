# `make train` and `make test` set everything up on a fresh machine (Python 3.11, pip).
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: install train test test-fast lint bench clean

# pip would compile the packages' bytecode on one core; compileall does it on every core.
$(STAMP): pyproject.toml constraints.txt
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet --no-compile -c constraints.txt -e ".[dev,ray,mujoco,atari,brax,playground,tune,wandb]"
	$(VENV)/bin/python -m compileall -q -j 0 "$$($(VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
	touch $(STAMP)

install: $(STAMP)

train: $(STAMP)
	$(VENV)/bin/heron train ppo

test: $(STAMP)
	$(VENV)/bin/python -m pytest -n 2 --dist loadgroup -q --durations=25

test-fast: $(STAMP)
	$(VENV)/bin/python -m pytest -n 2 --dist loadgroup -q --durations=25 -m "not slow"

lint: $(STAMP)
	$(VENV)/bin/ruff check heron tests benchmarks

bench: $(STAMP)
	$(VENV)/bin/python benchmarks/ppo_cartpole.py

clean:
	rm -rf $(VENV) runs
