"""The shared launcher does not pass the caller's SEGMENTSTORE_* settings to the server
unless asked (issue 14): a setting exported in a shell must not change a test."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from segmentstore.server.launcher import ServerProcess


@pytest.mark.parametrize("inherit", [False, True])
def test_caller_settings_pass_only_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inherit: bool
) -> None:
    monkeypatch.setenv("SEGMENTSTORE_FSYNC", "never")
    server = ServerProcess(tmp_path / "data", http_port=-1, inherit_settings=inherit)
    server.start()
    try:
        ready = next(line for line in server.log if "segmentstore ready" in line)
        assert ("fsync=never" if inherit else "fsync=always") in ready
        assert server.stop() == 0
    finally:
        server.kill()


@pytest.mark.parametrize("end", ["kill", "stop"])
def test_a_stopped_server_leaves_no_open_pipe(tmp_path: Path, end: str) -> None:
    """The stderr pipe is closed once the child is gone (an unclosed one is a
    ResourceWarning in whichever later test the collector happens to run)."""
    server = ServerProcess(tmp_path / "data", http_port=-1)
    server.start()
    assert server.proc is not None and server.proc.stderr is not None
    pipe = server.proc.stderr
    server.kill() if end == "kill" else server.stop()
    deadline = time.monotonic() + 5
    while not pipe.closed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert pipe.closed
