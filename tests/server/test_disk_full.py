"""Appends while the disk is full (issue 13 item 9): each gets an ErrorMessage (code -1,
"append failed: ...") instead of a closed connection; the connection keeps serving other
requests, and appends work again once space is freed. Needs a small filesystem: a tmpfs
mounted for the test (skipped where mounting is not allowed)."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from segmentstore_client.protocol import (
    DataAppended,
    ErrorMessage,
    block_end,
    frame_event,
)

from .wire import WireClient, next_id, unique

if TYPE_CHECKING:
    from conftest import ServerFactory

MiB = 1024 * 1024


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=240m", "tmpfs", str(mount)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(path: Path) -> None:
    """Write zeros to ``path`` until the filesystem is full."""
    block = b"\0" * MiB
    with open(path, "wb", buffering=0) as f:
        for _ in range(1024):
            try:
                f.write(block)
            except OSError as e:
                assert e.errno == errno.ENOSPC
                break
        with contextlib.suppress(OSError):
            for _ in range(1024):
                f.write(block[:4096])


async def test_appends_on_a_full_disk_get_an_error_reply(
    server_factory: ServerFactory, small_disk: Path
) -> None:
    server = server_factory(data_dir=small_disk / "data", extra_args=["--fsync", "never"])
    server.start()
    filler = small_disk / "filler"
    async with await WireClient.connect(server.host, server.port) as c:
        name = unique("full")
        await c.create_segment(name)
        fill(filler)
        w = uuid.uuid4()
        await c.setup_append(w, name)
        payload = frame_event(b"x" * (MiB - 8))
        error: ErrorMessage | None = None
        n = 0
        for _ in range(400):  # the log's ready-made files absorb some appends first
            n += 1
            rid = next_id()
            c.send(block_end(w, payload, 1, n, rid))
            reply = await c.wait_for(
                lambda x, rid=rid, n=n: (
                    (isinstance(x, DataAppended) and x.event_number == n)
                    or (isinstance(x, ErrorMessage) and x.request_id == rid)
                ),
                timeout=20,
            )
            if isinstance(reply, ErrorMessage):
                error = reply
                break
        assert error is not None, "the disk never filled up"
        assert error.error_code == -1 and error.segment == name
        assert "append failed" in error.message
        acked = n - 1
        # The connection still answers; the writer's session ended with the error.
        info = await c.info(name)
        assert info.write_offset >= acked * MiB
        os.unlink(filler)
        # Space is back: the writer sets up again and appends.
        last = await c.setup_append(w, name)
        assert last >= acked
        c.send(block_end(w, payload, 1, last + 1, next_id()))
        await c.wait_acked(w, last + 1, timeout=20)
    assert server.running
    assert not any("Traceback" in line for line in server.log), "".join(server.log[-40:])
