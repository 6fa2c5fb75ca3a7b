# The chunkyard worker image: CPU torch, chunkyard with its Dask and fast (OpenVINO) extras, the flows, sql/ and prefect.yaml.
# Built by docker-compose.yml (service `worker`); the same image runs the optional Dask scheduler/workers.
FROM python:3.11-slim

ARG TORCH_VERSION=2.13.0
ARG PREFECT_VERSION=3.9.1

ENV PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1 \
    HF_HUB_OFFLINE=1 \
    TOKENIZERS_PARALLELISM=false

WORKDIR /app

# CPU build of torch first, so the package install below never pulls the multi-GB CUDA build.
RUN pip install --index-url https://download.pytorch.org/whl/cpu "torch==${TORCH_VERSION}"

COPY pyproject.toml README.md ./
COPY pipeline ./pipeline
COPY flows ./flows
COPY sql ./sql
COPY prefect.yaml ./

# A normal install: the wheel carries sql/ (as pipeline.sql). The sources stay in /app for prefect.yaml's
# entrypoints (flows/*.py); Prefect pinned to the server image's version.
RUN pip install ".[dask,fast]" "prefect==${PREFECT_VERSION}"

CMD ["chunkyard", "--help"]
