"""The CLI on a terminal: ``tail -f`` and a progress bar, driven through a pseudo-terminal
(pexpect) and rendered as a screen (pyte), as a person would see them."""

from __future__ import annotations

import struct
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pexpect
import pyte
from segmentstore_client import sync

from .conftest import CliRunner, cli_env

if TYPE_CHECKING:
    from conftest import ServerProcess  # tests/conftest.py

ROWS, COLS = 24, 100


def spawn(endpoint: str, *args: str, env: dict[str, str] | None = None) -> pexpect.spawn:
    full_env = cli_env(endpoint) | (env or {})
    return pexpect.spawn(
        sys.executable,
        ["-m", "segmentstore", *args],
        env=full_env,
        dimensions=(ROWS, COLS),
        timeout=30,
    )


def screen_of(raw: bytes) -> list[str]:
    screen = pyte.Screen(COLS, ROWS)
    stream = pyte.ByteStream(screen)
    stream.feed(raw.replace(b"\n", b"\r\n").replace(b"\r\r\n", b"\r\n"))
    return [line.rstrip() for line in screen.display if line.strip()]


def test_tail_follow_on_a_terminal_and_ctrl_c(
    module_server: ServerProcess, cli: CliRunner, segment: str
) -> None:
    cli("segment", "create", segment)
    cli("segment", "write", segment, "first", "second\x1b[2J")  # an escape sequence in data
    child = spawn(module_server.endpoint, "segment", "tail", "-f", "--offsets", segment)
    raw = b""
    try:
        child.expect(rb"second")
        raw += child.before + child.after
        with sync.connect(module_server.endpoint) as client, client.writer(segment) as w:
            time.sleep(0.3)
            w.write("live ✓".encode()).wait(10)
            acked = time.monotonic()
            child.expect("live ✓".encode())
            assert time.monotonic() - acked < 1.0
            raw += child.before + child.after
        child.sendintr()  # Ctrl-C ends a follower quietly with 130
        child.expect(pexpect.EOF)
        raw += child.before
    finally:
        child.close(force=True)
    assert child.exitstatus == 130, raw
    assert b"Traceback" not in raw
    screen = screen_of(raw)  # the escape sequence in the data did not clear the screen
    assert screen[:3] == ["0       first", "13      second\\x1b[2J", "31      live ✓"]
    assert screen[3:] in ([], ["^C"])  # the terminal may echo the interrupt


def test_progress_bar_on_a_large_import(
    module_server: ServerProcess, cli: CliRunner, segment: str, tmp_path: Path
) -> None:
    pack = struct.Struct(">I").pack
    payload = b"x" * 100
    (tmp_path / "big.lp").write_bytes(b"".join(pack(100) + payload for _ in range(200_000)))
    child = spawn(
        module_server.endpoint,
        "segment",
        "import",
        segment,
        str(tmp_path / "big.lp"),
        "--create",
        env={"SEGMENTSTORE_PROGRESS_DELAY": "0"},  # the bar shows after 1 s by default
    )
    child.expect(pexpect.EOF, timeout=60)
    child.close()
    raw = child.before
    assert child.exitstatus == 0, raw
    assert b"\r" in raw  # the bar redrew itself in place
    screen = screen_of(raw)
    bar, summary = screen[-2], screen[-1]
    assert bar.startswith(f"import {segment}: 100%"), screen
    assert "19.8M/19.8M" in bar  # bytes of the file, in MiB
    assert summary.startswith("imported 200,000 events (20.0 MB) in ")
    # a short import on the same terminal shows no bar, only the summary
    (tmp_path / "small.lp").write_bytes(pack(1) + b"y")
    child = spawn(module_server.endpoint, "segment", "import", segment, str(tmp_path / "small.lp"))
    child.expect(pexpect.EOF, timeout=60)
    child.close()
    assert child.exitstatus == 0
    screen = screen_of(child.before)
    assert len(screen) == 1 and screen[0].startswith("imported 1 events"), screen


def test_write_from_a_terminal_sends_each_line_as_typed(
    module_server: ServerProcess, cli: CliRunner, segment: str
) -> None:
    cli("segment", "create", segment)
    child = spawn(module_server.endpoint, "segment", "write", segment)
    try:
        child.expect("Ctrl-D ends")
        child.sendline("typed 1")
        deadline = time.monotonic() + 10
        while cli("segment", "cat", segment).stdout != b"typed 1\n":  # before end of input
            assert time.monotonic() < deadline, "the typed line was not written"
            time.sleep(0.2)
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    assert b"wrote 1 events" in child.before
