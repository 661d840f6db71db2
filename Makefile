# Every target builds and uses the local virtual environment in .venv by itself.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

# The older SDK generation (openai 1.x and anthropic 0.x, both on httpx), in an environment of its
# own: the provider and resilience tests run there too (`make test-old-sdks`, run by .ci/run).
OLD_VENV := .venv-old-sdks
OLD_PY := $(OLD_VENV)/bin/python
OLD_STAMP := $(OLD_VENV)/.installed-stamp
OLD_SDKS := 'openai>=1.40,<2' 'anthropic>=0.40,<1'
OLD_SDK_TESTS = $(sort $(wildcard tests/test_chat_*.py tests/test_anthropic_*.py tests/test_responses*.py \
	tests/test_async_*.py tests/test_bedrock*.py tests/test_cross_provider.py \
	tests/test_*resilience*.py tests/test_backoff*.py tests/test_rate_limits.py tests/test_sdk_internals.py tests/test_user_surface.py \
	tests/test_pytest_plugin.py tests/test_examples.py))

.PHONY: demo test test-old-sdks docs lint diagrams bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[all,dev,docs]'
	touch $(STAMP)

$(OLD_STAMP): pyproject.toml
	$(PYTHON) -m venv $(OLD_VENV)
	$(OLD_PY) -m pip install -q --upgrade pip
	$(OLD_PY) -m pip install -q -e '.[all,dev]' $(OLD_SDKS)
	touch $(OLD_STAMP)

demo: $(STAMP)
	$(PY) -m fsm_agent demo

test: $(STAMP)
	$(PY) -m pytest

test-old-sdks: $(OLD_STAMP)
	$(OLD_PY) -c "import openai, anthropic; print('older SDKs: openai', openai.__version__, '· anthropic', anthropic.__version__)"
	$(OLD_PY) -m pytest $(OLD_SDK_TESTS)

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet

lint: $(STAMP)
	$(PY) -m ruff check fsm_agent tests bench examples
	$(PY) -m mypy

diagrams: $(STAMP)
	$(PY) -m fsm_agent diagram --out diagrams

bench: $(STAMP)
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) $(OLD_VENV) site .pytest_cache .mypy_cache .ruff_cache
