"""Deployment files, checked where Docker cannot run: structure, health checks, and agreement with the code."""

from __future__ import annotations

import importlib
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from pipeline.config import Settings

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


@pytest.fixture(scope="module")
def prefect_yaml() -> dict:
    return yaml.safe_load((ROOT / "prefect.yaml").read_text())


def _env(service: dict) -> dict[str, str]:
    env = service.get("environment", {})
    return (
        dict(e.split("=", 1) for e in env) if isinstance(env, list) else {k: str(v) for k, v in env.items()}
    )


def _build_args(service: dict) -> dict[str, str]:
    return {k: str(v) for k, v in service["build"]["args"].items()}


def test_services_have_health_checks_and_wait_for_each_other(compose):
    services = compose["services"]
    assert {"postgres", "prefect-server", "worker"} <= set(services)
    for name, svc in services.items():
        test = svc.get("healthcheck", {}).get("test")
        assert test and test[0] in ("CMD", "CMD-SHELL"), f"{name} has no health check"
    deps = services["worker"]["depends_on"]
    assert deps["postgres"]["condition"] == deps["prefect-server"]["condition"] == "service_healthy"
    used = {v.split(":")[0] for s in services.values() for v in s.get("volumes", [])}
    assert set(compose["volumes"]) <= used, "a declared volume is never mounted"
    assert {"pgdata", "prefect-data"} <= set(compose["volumes"])
    assert services["postgres"]["image"].startswith("pgvector/pgvector:")


def test_environment_matches_the_settings(compose):
    services = compose["services"]
    for name, svc in services.items():
        for key in _env(svc):
            if key.startswith("CHUNKYARD_"):
                field = key.removeprefix("CHUNKYARD_").lower()
                assert field in Settings.model_fields, f"{name}: {key} is not a chunkyard setting"
    worker = _env(services["worker"])
    url = urlparse(worker["CHUNKYARD_DATABASE_URL"])
    pg = _env(services["postgres"])
    assert url.hostname == "postgres" and url.port == 5432
    assert (url.username, url.path.lstrip("/")) == (pg["POSTGRES_USER"], pg["POSTGRES_DB"])
    # no password in the file: the worker's libpq and the server read the same required variable
    assert url.password is None and worker["PGPASSWORD"] == pg["POSTGRES_PASSWORD"]
    assert pg["POSTGRES_PASSWORD"].startswith("${CHUNKYARD_DB_PASSWORD:?")
    api = urlparse(worker["PREFECT_API_URL"])
    server = services["prefect-server"]
    assert api.hostname == "prefect-server" and api.path == "/api"
    assert str(api.port) in server["command"] and f"127.0.0.1:{api.port}:{api.port}" in server["ports"]
    # published ports answer on this host only
    for name, svc in services.items():
        for port in svc.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} on every interface"
    assert _env(services["dask-worker"]) == worker, "Dask workers must see the same database and API"


def test_versions_agree_with_the_code(compose):
    services = compose["services"]
    worker = services["worker"]
    args = _build_args(worker)
    server_tag = services["prefect-server"]["image"].split(":")[1]
    assert server_tag.startswith(args["PREFECT_VERSION"] + "-python"), "server and worker Prefect differ"
    import prefect

    assert args["PREFECT_VERSION"].split(".")[0] == prefect.__version__.split(".")[0]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert worker["image"] == f"chunkyard:{project['version']}"
    assert "prefect-dask" in " ".join(project["optional-dependencies"]["dask"])
    make_torch = re.search(r"^TORCH_VERSION\s*\?=\s*(\S+)", (ROOT / "Makefile").read_text(), re.M)
    assert make_torch and args["TORCH_VERSION"] == make_torch.group(1)
    dockerfile = (ROOT / "Dockerfile").read_text()
    for arg in args:
        assert re.search(rf"^ARG {arg}=", dockerfile, re.M), f"Dockerfile has no ARG {arg}"
    assert "whl/cpu" in dockerfile and '".[dask,fast]"' in dockerfile  # CPU torch, OpenVINO for embedding
    for svc in ("dask-scheduler", "dask-worker"):
        assert services[svc]["image"] == worker["image"] and services[svc]["profiles"] == ["dask"]


def test_worker_serves_the_pool_the_deployments_use(compose, prefect_yaml):
    command = " ".join(compose["services"]["worker"]["command"])
    pools = {d["work_pool"]["name"] for d in prefect_yaml["deployments"]}
    assert len(pools) == 1
    assert f"--pool {pools.pop()}" in command and "deploy --all" in command


def test_prefect_yaml_deployments_point_at_flows_with_valid_parameters(prefect_yaml):
    from prefect import Flow
    from prefect.client.schemas.schedules import CronSchedule

    names = [d["name"] for d in prefect_yaml["deployments"]]
    assert len(set(names)) == len(names)
    for dep in prefect_yaml["deployments"]:
        path, attr = dep["entrypoint"].split(":")
        assert (ROOT / path).is_file(), path
        flow = getattr(importlib.import_module(path.removesuffix(".py").replace("/", ".")), attr)
        assert isinstance(flow, Flow)
        flow.validate_parameters(dep.get("parameters", {}))  # raises on a wrong name or type
        for sched in dep.get("schedules", []):
            if "cron" in sched:
                CronSchedule(cron=sched["cron"], timezone=sched.get("timezone"))
            else:
                assert float(sched["interval"]) > 0
    import prefect

    assert prefect_yaml["prefect-version"].split(".")[0] == prefect.__version__.split(".")[0]


@pytest.mark.skipif(shutil.which("docker") is None, reason="no docker client")
def test_docker_compose_config_when_available():
    probe = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip("docker client has no compose plugin")
    res = subprocess.run(
        ["docker", "compose", "-f", str(ROOT / "docker-compose.yml"), "config", "--quiet"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert res.returncode == 0, res.stderr
