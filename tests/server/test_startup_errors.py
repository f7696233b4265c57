"""``segmentstore serve`` start-up failures end with one line on stderr and exit code 2,
no traceback (issue 18 item 6): a busy --port, a busy --http-port, a data dir that cannot
be used."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "segmentstore", "serve", "--log-level", "ERROR", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("which", ["port", "http-port", "data-dir"])
def test_startup_failure_is_one_line_and_exit_2(tmp_path: Path, busy_port: int, which: str) -> None:
    args = ["--port", "0", "--http-port", "-1", "--data-dir", str(tmp_path / "data")]
    if which == "port":
        args[1] = str(busy_port)
        expected = f"cannot listen on 127.0.0.1:{busy_port}"
    elif which == "http-port":
        args[3] = str(busy_port)
        expected = f"cannot serve metrics on 127.0.0.1:{busy_port}"
    else:
        (tmp_path / "data").write_text("a file where the data dir should be")
        expected = "cannot open the data dir"
    done = serve(*args)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines == [lines[0]] and lines[0].startswith("segmentstore: "), done.stderr
    assert expected in lines[0]
    assert "Traceback" not in done.stderr
