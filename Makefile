# Every target builds and uses the local virtual environment in .venv by itself.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

# The older SDK generation (openai 1.x and anthropic 0.x, both on httpx), in an environment of its
# own: the provider and resilience tests run there too (`make test-old-sdks`, run by .ci/run), and the
# provider x driver matrix (tests/matrix/test_shared_behaviours.py) the shared behaviours of those
# files moved to. The lowest `transitions` pyproject allows is installed there, so the engine is
# tested at both ends. The proxy's SDK tests run there too: its upstream clients are the
# installed SDKs, of either generation.
OLD_VENV := .venv-old-sdks
OLD_PY := $(OLD_VENV)/bin/python
OLD_STAMP := $(OLD_VENV)/.installed-stamp
OLD_SDKS := 'openai>=1.40,<2' 'anthropic>=0.40,<1' 'transitions==0.9.0'
# The files by name, in whichever layer directory of tests/ they sit (tests/*/), or at the top.
OLD_SDK_TEST_NAMES := test_chat_*.py test_anthropic_*.py test_responses*.py test_async_*.py test_bedrock*.py \
	test_cross_provider.py test_shared_behaviours.py test_*resilience*.py test_backoff*.py test_rate_limits.py \
	test_sdk_internals.py test_user_surface.py test_pytest_plugin.py test_examples.py test_table_complete.py \
	test_proxy_sdks.py
OLD_SDK_TESTS = $(sort $(wildcard $(addprefix tests/,$(OLD_SDK_TEST_NAMES)) $(addprefix tests/*/,$(OLD_SDK_TEST_NAMES))))

# LiteLLM's proxy, for bench/bench_proxy.py to measure `fsm-agent serve` against, in an environment
# of its own (it pins its own versions of much of what fsm_agent uses). Its `proxy` extra names a
# package the index does not carry (litellm-proxy), so the proxy's own dependencies are listed.
LITELLM_VENV := .venv-litellm
LITELLM_STAMP := $(LITELLM_VENV)/.installed-stamp
LITELLM := 'litellm==1.110.2' 'fastapi>=0.136.3,<1' 'uvicorn>=0.33,<1' 'gunicorn>=23,<24' 'uvloop>=0.22.1,<1' \
	'backoff>=2.2.1,<3' 'pyyaml>=6,<7' 'orjson>=3.11.6,<4' 'apscheduler>=3.11.2,<4' 'pyjwt>=2.13,<3' \
	'python-multipart>=0.0.27,<1' 'cryptography>=49,<51' 'websockets>=15.0.1,<16' 'rq>=2.7,<3' \
	'fastapi-sso>=0.19,<1' 'pynacl>=1.6.2,<2' 'mcp>=2.3,<3' litellm-enterprise litellm-proxy-extras \
	semver expression soundfile

.PHONY: demo test test-fast test-old-sdks docs lint diagrams bench bench-proxy clean

# Each target installs what it needs and no more: the demo the package with its SDKs and live
# display; the tests and lint the development tools too; the docs site its MkDocs plugins.
DEMO_STAMP := $(VENV)/.demo-stamp
DOCS_STAMP := $(VENV)/.docs-stamp

$(DEMO_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[all]'
	touch $(DEMO_STAMP)

$(STAMP): $(DEMO_STAMP)
	$(PY) -m pip install -q -e '.[all,dev,frameworks]'
	touch $(STAMP)

$(DOCS_STAMP): $(DEMO_STAMP)
	$(PY) -m pip install -q -e '.[all,docs]'
	touch $(DOCS_STAMP)

$(OLD_STAMP): pyproject.toml
	$(PYTHON) -m venv $(OLD_VENV)
	$(OLD_PY) -m pip install -q --upgrade pip
	$(OLD_PY) -m pip install -q -e '.[all,dev]' $(OLD_SDKS)
	touch $(OLD_STAMP)

demo: $(DEMO_STAMP)
	$(PY) -m fsm_agent demo

# Two workers (pytest-xdist), one per core of the 2-core machines this runs on: most tests wait on
# loopback sockets and subprocesses, so the suite takes about half the time; `--dist worksteal`
# keeps a long test from holding the other worker idle at the end.
XDIST := -n 2 --dist worksteal

test: $(STAMP)
	$(PY) -m pytest $(XDIST)

# The suite without the tests marked slow (each over ~5 s): a quick check while working.
test-fast: $(STAMP)
	$(PY) -m pytest $(XDIST) -m "not slow"

test-old-sdks: $(OLD_STAMP)
	$(OLD_PY) -c "import openai, anthropic, transitions; print('older SDKs: openai', openai.__version__, '· anthropic', anthropic.__version__, '· transitions', transitions.__version__)"
	$(OLD_PY) -m pytest $(XDIST) $(OLD_SDK_TESTS)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet

lint: $(STAMP)
	$(PY) -m ruff check fsm_agent tests bench examples
	$(PY) -m ruff format --check fsm_agent tests bench examples
	$(PY) -m mypy

diagrams: $(DEMO_STAMP)
	$(PY) -m fsm_agent diagram --out diagrams

bench: $(STAMP)
	$(PY) bench/run_all.py

$(LITELLM_STAMP):
	$(PYTHON) -m venv $(LITELLM_VENV)
	$(LITELLM_VENV)/bin/python -m pip install -q $(LITELLM)
	touch $(LITELLM_STAMP)

# `fsm-agent serve` beside the direct way and LiteLLM's proxy (bench/bench_proxy.py).
bench-proxy: $(STAMP) $(LITELLM_STAMP)
	$(PY) bench/bench_proxy.py

clean:
	rm -rf $(VENV) $(OLD_VENV) $(LITELLM_VENV) site .pytest_cache .mypy_cache .ruff_cache
