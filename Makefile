# The two commands of the README. Both bootstrap .venv from the pinned requirements on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test bootstrap migrate seed clean-venv

$(VENV)/.python-ok:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is needed (found " + sys.version.split()[0] + ")")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@touch $@

$(VENV)/.runtime: requirements.txt | $(VENV)/.python-ok
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
	@touch $@

$(VENV)/.test: requirements-test.txt requirements.txt | $(VENV)/.runtime
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements-test.txt
	@touch $@

bootstrap: $(VENV)/.runtime

migrate: $(VENV)/.runtime
	$(BIN)/python manage.py migrate --noinput

seed: migrate
	$(BIN)/python manage.py seed_demo

# The embedded default: SQLite in var/, no broker, no external service.
run: seed
	$(BIN)/python manage.py runportal --host $(HOST) --port $(PORT)

test: $(VENV)/.test
	$(BIN)/python -m pytest

clean-venv:
	rm -rf $(VENV)
