"""A container stopped by an internal error while applying a batch (storage/commit.py's
header), seen from a client of the server's real Connection (harness.py): the append whose
batch failed, a tail read parked on the segment and every later request each get the
protocol's ErrorMessage saying so; none hangs, and the connection stays up."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from segmentstore_client.protocol import (
    CreateSegment,
    DataAppended,
    ErrorMessage,
    ReadSegment,
)

from segmentstore.server.metrics import MetricsPage

from .harness import harness
from .test_harness import acks, append, first_ack, setup

STOPPED = "stopped after an internal error"


def errors(received: list[Any]) -> dict[int, ErrorMessage]:
    return {c.request_id: c for c in received if isinstance(c, ErrorMessage)}


async def test_a_stopped_container_answers_every_request_with_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with harness(tmp_path) as h:
        peer, w = await first_ack(h)
        tail = acks(peer)[0].current_segment_write_offset
        peer.send(ReadSegment("s", tail, 1000, "", 50))  # parked at the tail
        await peer.settle()

        metrics = h.server.ctx.metrics
        metrics.store_stats = h.server.ctx.store.stats  # as Server.start wires it
        page = MetricsPage(metrics)
        assert b"segmentstore_containers_stopped 0.0" in page.render()[0]

        container = h.server.ctx.store._containers[0]
        apply = container._apply

        def broken(ops: Any) -> None:
            monkeypatch.setattr(container, "_apply", apply)  # once
            raise ZeroDivisionError("injected")

        monkeypatch.setattr(container, "_apply", broken)
        peer.send_raw(append(w, 2, 100))
        await peer.until(lambda: {50, 102} <= errors(peer.received).keys(), "both errors")
        got = errors(peer.received)
        assert got[102].error_code == -1 and STOPPED in got[102].message
        assert "append failed" in got[102].message and "restart" in got[102].message
        assert STOPPED in got[50].message
        assert [a.event_number for a in acks(peer)] == [1]
        assert not peer.closed
        # Operators see it: /metrics counts the stopped container.
        assert b"segmentstore_containers_stopped 1.0" in page.render()[0]

        # Later requests: an error reply at once, not a hang.
        peer.send(CreateSegment(60, "t", 0, 0, ""))
        await peer.until(lambda: 60 in errors(peer.received), "create refused")
        assert STOPPED in errors(peer.received)[60].message
        other = h.connect()
        w2 = uuid.uuid4()
        await setup(other, "s", w2)  # answered from what was applied
        other.send_raw(append(w2, 1, 100))
        await other.until(lambda: 101 in errors(other.received), "append refused")
        assert STOPPED in errors(other.received)[101].message
        assert not [c for c in other.received if isinstance(c, DataAppended)]
