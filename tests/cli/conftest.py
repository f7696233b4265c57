"""Fixtures for the command-line tests: the CLI run as a subprocess against a real server."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import ServerProcess  # tests/conftest.py

CliRunner = Callable[..., subprocess.CompletedProcess[bytes]]


def cli_env(endpoint: str | None = None, controller: str | None = None) -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("SEGMENTSTORE_ENDPOINT", None)
    env.pop("SEGMENTSTORE_CONTROLLER", None)
    if endpoint is not None:
        env["SEGMENTSTORE_ENDPOINT"] = endpoint
    if controller is not None:
        env["SEGMENTSTORE_CONTROLLER"] = controller
    return env


def run_cli(
    *args: str,
    endpoint: str | None = None,
    controller: str | None = None,
    input: bytes | None = None,
    timeout: float = 60.0,
) -> subprocess.CompletedProcess[bytes]:
    """``segmentstore ARGS`` in a child process; no output of it may hold a traceback."""
    proc = subprocess.run(
        [sys.executable, "-m", "segmentstore", *args],
        input=input if input is not None else b"",
        capture_output=True,
        env=cli_env(endpoint, controller),
        timeout=timeout,
    )
    if "--debug" not in args:
        assert b"Traceback" not in proc.stderr, proc.stderr.decode()
    return proc


@pytest.fixture
def cli(module_server: ServerProcess) -> CliRunner:
    """Run the CLI against the module's server (SEGMENTSTORE_ENDPOINT is set)."""

    def run(*args: str, **kw: object) -> subprocess.CompletedProcess[bytes]:
        kw.setdefault("endpoint", module_server.endpoint)
        return run_cli(*args, **kw)  # type: ignore[arg-type]

    return run


@pytest.fixture
def segment() -> str:
    """A fresh segment name (the module's tests share one server)."""
    return f"cli/s{uuid.uuid4().hex[:12]}/0"
