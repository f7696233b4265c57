"""Start a ``segmentstore serve`` child process and wait for its ready line: the one
launcher shared by the test suite and the benchmarks.

The child gets the caller's environment WITHOUT any ``SEGMENTSTORE_*`` variable (a
setting exported in the caller's shell must not silently change a test or a benchmark)
unless ``inherit_settings=True``; settings are passed as flags (``extra_args``) or as
``env``. The child listens on 127.0.0.1 on an ephemeral port unless told otherwise; the
ready line gives the port (and the metrics port). Its stderr is kept in ``log`` (bounded)
by a daemon thread so the child never blocks on a full pipe. ``rlimits`` are applied in
the child before it starts (e.g. a small RLIMIT_NOFILE). ``DEFAULT_ENV`` holds settings
every child of this process gets unless ``env`` says otherwise (the test suite uses it for
small log files, so hundreds of servers do not zero-fill 64 MiB each).
"""

from __future__ import annotations

import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

READY = re.compile(r"listening on ([0-9.]+):(\d+)")
METRICS = re.compile(r"metrics on https?://([0-9.]+):(\d+)/metrics")
SETTINGS_PREFIX = "SEGMENTSTORE_"
MAX_LOG_LINES = 20_000
DEFAULT_ENV: dict[str, str] = {}  # applied before ``env``; empty unless the caller fills it


@dataclass
class ServerProcess:
    """A ``segmentstore serve`` child process; restartable on the same data dir and port."""

    data_dir: Path
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # extra environment variables
    host: str = "127.0.0.1"
    port: int = 0
    http_port: int = 0  # 0: any free port; -1: no metrics endpoint
    inherit_settings: bool = False  # pass the caller's SEGMENTSTORE_* variables through
    rlimits: dict[int, tuple[int, int]] = field(default_factory=dict)
    command_prefix: list[str] = field(default_factory=list)  # e.g. ["-m", "cProfile", ...]
    proc: subprocess.Popen[str] | None = None
    log: list[str] = field(default_factory=list)

    @property
    def endpoint(self) -> str:
        return f"tcp://{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def command(self) -> list[str]:
        return [
            sys.executable,
            *self.command_prefix,
            "-m",
            "segmentstore",
            "serve",
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
            "--http-port",
            str(self.http_port),
            "--log-level",
            "INFO",  # the ready line is logged at INFO
            # No gRPC controller unless asked (its default port 9090 would clash between
            # servers running at once); a --controller-port in extra_args wins.
            "--controller-port",
            "-1",
            *self.extra_args,
        ]

    def environment(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if self.inherit_settings or not k.startswith(SETTINGS_PREFIX)
        }
        env["PYTHONUNBUFFERED"] = "1"
        env.update(DEFAULT_ENV)
        env.update(self.env)
        return env

    def _limit(self) -> None:
        for which, limits in self.rlimits.items():
            resource.setrlimit(which, limits)

    def start(self, timeout: float = 60.0) -> None:
        self.proc = subprocess.Popen(
            self.command(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=self.environment(),
            preexec_fn=self._limit if self.rlimits else None,
        )
        stderr = self.proc.stderr
        assert stderr is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = stderr.readline()
            if not line:
                self.proc.wait(10)
                stderr.close()
                raise RuntimeError(
                    f"server exited with {self.proc.returncode} during startup:\n"
                    + "".join(self.log[-50:])
                )
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
            stderr.close()
            raise RuntimeError("server did not become ready:\n" + "".join(self.log[-50:]))
        threading.Thread(target=self._drain, args=(stderr,), daemon=True).start()

    def _drain(self, stream: TextIO) -> None:
        with stream:  # closed at the child's end: no unclosed-file warning in the caller
            for line in stream:
                if len(self.log) < MAX_LOG_LINES:
                    self.log.append(line)

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait; returns the exit code (SIGKILL after ``timeout``, re-raised)."""
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

    def rss(self) -> int:
        """The child's resident memory in bytes (Linux /proc)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS in /proc status")


__all__ = ["METRICS", "READY", "ServerProcess"]
