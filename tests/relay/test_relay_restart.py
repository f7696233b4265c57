"""Source ids survive a restart (kept in a segment attribute), and so do SCNs and the
checkpoints that name them: a checkpoint taken before the restart resumes exactly."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING

import segmentstore_client as sc

from .helpers import db_windows, get, source_name, stream_all, write

if TYPE_CHECKING:
    from conftest import ServerFactory


async def test_ids_scns_and_checkpoints_survive_a_restart(server_factory: ServerFactory) -> None:
    srv = server_factory()
    srv.start()
    b, a = "restart/b/0", "restart/a/0"
    await write(srv.endpoint, b, db_windows(3, 2))
    _s, _h, body = await get(srv.http_port, "/sources")  # b is seen first: id 1
    await write(srv.endpoint, a, [b"raw-%d" % i for i in range(5)])
    async with sc.connect(srv.endpoint) as client:  # many new segments: ids given in one batch
        await asyncio.gather(*(client.create_segment(f"restart/many/{i}") for i in range(300)))
    _s, _h, body = await get(srv.http_port, "/sources")
    before = {s["name"]: s["id"] for s in json.loads(body)}
    assert len(before) == 302 and len(set(before.values())) == 302
    assert before[source_name(b)] < before[source_name(a)]  # not alphabetical: first seen
    both = f"{source_name(a)},{source_name(b)}"
    events, _a, cp = await stream_all(srv.http_port, both, size=300)
    assert len(events) == 11
    srv.stop()
    srv.restart()
    _s, _h, body = await get(srv.http_port, "/sources")
    assert {s["name"]: s["id"] for s in json.loads(body)} == before
    await write(srv.endpoint, b, db_windows(1, 2, first_seq=900))
    await write(srv.endpoint, a, [b"after"])
    rest, _a, _cp = await stream_all(srv.http_port, both, checkpoint=cp)
    assert sorted(e.sequence for e in rest if e.src_id == 7) == [900, 900]
    assert [e.value for e in rest if e.src_id != 7] == [b"after"]
