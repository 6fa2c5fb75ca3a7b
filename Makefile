# Two commands do all the set-up:  `make demo` (the main job) and `make test` (the suite).
PYTHON        ?= python3
VENV          ?= .venv
TORCH_VERSION ?= 2.13.0
# CPU build by default; GPU users: make install TORCH_INDEX=https://download.pytorch.org/whl/cu128
TORCH_INDEX   ?= https://download.pytorch.org/whl/cpu
BIN            = $(VENV)/bin

.PHONY: install demo test test-fast lint bench clean-db

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	# torch first, from the CPU index (falls back to the default index, e.g. a local wheel mirror)
	$(BIN)/pip install --retries 0 --timeout 20 --index-url $(TORCH_INDEX) "torch==$(TORCH_VERSION)" \
	  || $(BIN)/pip install "torch==$(TORCH_VERSION)"
	$(BIN)/pip install -e ".[dev,dask,ocr,fast]"
	touch $@

demo: install
	$(BIN)/chunkyard ingest ./examples/docs
	$(BIN)/chunkyard search "how do I rotate the API keys?" -k 3

test: install
	$(BIN)/python -m pytest

# The suite without model loads, subprocess runs (the CLI, fresh interpreters), wheel builds, browser, Prefect server and outages
# (markers in pyproject.toml); `make test` stays the whole suite.
test-fast: install
	$(BIN)/python -m pytest -m "not (slow or subprocess or packaging or browser or prefect or outage)"

# The peers' packages (LangChain, LlamaIndex, Chonkie, semchunk, CocoIndex), then the chunker throughput table;
# every benchmark is a module of bench/ with its own --help (`python -m bench.<name> --help`); one-off
# experiments are in bench/experiments/ (README.md there).
bench: install
	$(BIN)/pip install -e ".[bench]"
	$(BIN)/python -m bench.chunkers --repeats 3

lint: install
	$(BIN)/ruff check pipeline flows tests bench

clean-db:
	-$(BIN)/chunkyard db stop
