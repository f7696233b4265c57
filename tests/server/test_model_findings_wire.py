"""What the storage model test found, seen over the wire (the in-memory harness)."""

from __future__ import annotations

from pathlib import Path

from segmentstore_client.protocol import DataAppended, ErrorMessage

from segmentstore.storage import EVENT_COUNT

from .harness import harness
from .test_harness import append, create, setup


async def test_a_writer_id_that_is_event_count_gets_an_error_not_a_lost_event(
    tmp_path: Path,
) -> None:
    """A writer id equal to EVENT_COUNT's attribute id (any UUID comes off the wire): its
    events used to be stored, or acknowledged as duplicates and dropped; now each append
    gets an ErrorMessage and nothing is stored, and other writers are unaffected."""
    async with harness(tmp_path) as h:
        peer = h.connect()
        await create(peer, "s")
        await setup(peer, "s", EVENT_COUNT)
        peer.send_raw(append(EVENT_COUNT, 1, 100))
        await peer.until(
            lambda: any(isinstance(c, ErrorMessage | DataAppended) for c in peer.received),
            "a reply to the append",
        )
        errors = [c for c in peer.received if isinstance(c, ErrorMessage)]
        assert errors and "EVENT_COUNT" in errors[0].message, peer.received
        assert not any(isinstance(c, DataAppended) for c in peer.received)
        assert h.server.ctx.store.info("s").length == 0
