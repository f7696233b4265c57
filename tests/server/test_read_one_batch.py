"""Group commit through the server's real Connection (commit.py, round 10): the appends one
socket read carries go to the log as ONE batch, even with no batch on its way when the
read arrives (the batch is sent from a call_soon, after the whole read was dispatched)."""

from __future__ import annotations

import uuid
from pathlib import Path

from .harness import harness
from .test_harness import acks, append, create, setup


async def test_appends_of_one_read_are_one_batch(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        peer = h.connect()
        await create(peer, "s")
        w = uuid.uuid4()
        await setup(peer, "s", w)
        container = h.server.ctx.store._containers[0]
        sent = 0
        for burst in (1, 50, 3):
            await peer.until(lambda: container._in_log is None and not container._ops, "idle")
            before = container.stats["batches"]
            peer.send_raw(b"".join(append(w, n, 100) for n in range(sent + 1, sent + burst + 1)))
            sent += burst
            await peer.until(lambda n=sent: len(acks(peer)) == n, f"{sent} acks")  # type: ignore[misc]
            assert container.stats["batches"] == before + 1
            assert container.stats["last_batch_records"] == burst
        assert [a.event_number for a in acks(peer)] == list(range(1, sent + 1))
