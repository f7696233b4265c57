"""The connection cap follows the open-file limit (issue 13 item 8): the soft limit is
raised to the hard one at start-up, the cap is that limit less a reserve for storage (both
logged), connections over the cap are refused, and storage keeps its fds: appends that
roll chunk files succeed while the cap is full."""

from __future__ import annotations

import asyncio
import contextlib
import re
import resource
import uuid
from pathlib import Path

from segmentstore_client.protocol import block_end, frame_event

from segmentstore.server.launcher import ServerProcess

from .wire import WireClient, next_id, parse_events, unique

MiB = 1024 * 1024


async def test_connection_cap_leaves_fds_for_storage(tmp_path: Path) -> None:
    server = ServerProcess(
        tmp_path / "data", rlimits={resource.RLIMIT_NOFILE: (160, 320)}, http_port=-1
    )
    server.start()
    hostile: list[asyncio.StreamWriter] = []
    try:
        line = next(x for x in server.log if "open-file limit" in x)
        m = re.search(r"open-file limit (\d+): up to (\d+) connections, (\d+) fds kept", line)
        assert m is not None, line
        limit, cap, reserve = map(int, m.groups())
        assert (limit, reserve, cap) == (320, 64, 256)  # soft raised to hard
        async with await WireClient.connect(server.host, server.port) as good:
            name = unique("fd")
            await good.create_segment(name)
            readers = []
            for _ in range(300):  # more than the cap
                r, w = await asyncio.open_connection(server.host, server.port)
                hostile.append(w)
                readers.append(r)
            await asyncio.sleep(0.5)

            async def was_refused(r: asyncio.StreamReader) -> bool:
                with contextlib.suppress(TimeoutError, ConnectionError):
                    return await asyncio.wait_for(r.read(1), 0.5) == b""
                return False

            refused = sum(await asyncio.gather(*(was_refused(r) for r in readers)))
            assert 300 - (cap - 1) <= refused <= 300 - (cap - 1) + 2, refused
            # Storage still opens files: 40 MiB of appends roll chunk files and log files.
            w = uuid.uuid4()
            await good.setup_append(w, name)
            for n in range(1, 41):
                good.send(block_end(w, frame_event(b"%d" % n + b"x" * (MiB - 16)), 1, n, next_id()))
            await good.wait_acked(w, 40, timeout=60)
            assert len(parse_events(await good.read_all(name))) == 40
    finally:
        for w in hostile:
            w.close()
        server.kill()
    assert not any("Too many open files" in x for x in server.log)
