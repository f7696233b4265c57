"""Shared fixtures: a real segmentstore server process on 127.0.0.1, ephemeral ports."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import pytest

READY = re.compile(r"listening on ([0-9.]+):(\d+)")
METRICS = re.compile(r"metrics on http://([0-9.]+):(\d+)/metrics")


@dataclass
class ServerProcess:
    """A ``segmentstore serve`` child process; restartable on the same data dir."""

    data_dir: Path
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # extra environment variables
    host: str = "127.0.0.1"
    port: int = 0
    http_port: int = 0
    proc: subprocess.Popen[str] | None = None
    log: list[str] = field(default_factory=list)

    @property
    def endpoint(self) -> str:
        return f"tcp://{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> None:
        args = [
            sys.executable,
            "-m",
            "segmentstore",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
            "--http-port",
            str(self.http_port),
            "--log-level",
            "INFO",
            # No gRPC controller unless a test asks for one (its default port 9090 would
            # clash between concurrent runs); a later --controller-port in extra_args wins.
            "--controller-port",
            "-1",
            *self.extra_args,
        ]
        env = dict(os.environ, PYTHONUNBUFFERED="1", **self.env)
        self.proc = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env
        )
        deadline = time.monotonic() + timeout
        assert self.proc.stderr is not None
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                raise RuntimeError("server exited during startup:\n" + "".join(self.log))
            self.log.append(line)
            m = READY.search(line)
            if m:
                self.port = int(m.group(2))
                mm = METRICS.search(line)
                if mm:
                    self.http_port = int(mm.group(2))
                break
        else:
            self.kill()
            raise RuntimeError("server did not become ready:\n" + "".join(self.log))
        # Keep draining stderr so the child never blocks on a full pipe.
        import threading

        def drain(stream: object = self.proc.stderr) -> None:
            for ln in stream:  # type: ignore[attr-defined]
                if len(self.log) < 20000:
                    self.log.append(ln)

        threading.Thread(target=drain, daemon=True).start()

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait; returns the exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            raise

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: the crash case."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def restart(self) -> None:
        """Start again on the same data dir and port."""
        self.start()


class ServerFactory(Protocol):
    """The type of the ``server_factory`` fixture."""

    def __call__(
        self,
        data_dir: Path | None = None,
        extra_args: list[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> ServerProcess: ...


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[ServerFactory]:
    """Make servers with ``server_factory(data_dir, extra_args)``; all killed at teardown."""
    made: list[ServerProcess] = []

    class Factory(ServerProcess):
        def __init__(
            self,
            data_dir: Path | None = None,
            extra_args: list[str] | None = None,
            env: dict[str, str] | None = None,
        ) -> None:
            super().__init__(
                data_dir or tmp_path / f"data{len(made)}", list(extra_args or []), dict(env or {})
            )
            made.append(self)

    yield Factory
    for s in made:
        s.kill()


@pytest.fixture
def server(server_factory: ServerFactory) -> ServerProcess:
    """A started server with a fresh data dir (fsync=always, the default)."""
    s = server_factory()
    s.start()
    return s


@pytest.fixture(scope="module")
def module_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server shared by the tests of a module (they must use their own segment names)."""
    s = ServerProcess(tmp_path_factory.mktemp("module-server"))
    s.start()
    yield s
    s.kill()
