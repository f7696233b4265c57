"""A writer's appends while earlier ones are still on their way to disk: the container's
inlined pending-attribute update (``SegmentContainer.append``'s hot path) must see each one,
so that a resend of a number still in flight is a duplicate, not a second copy."""

from __future__ import annotations

import asyncio
import uuid

from segmentstore.storage import NULL_ATTRIBUTE_VALUE, SegmentStore


async def test_a_resend_of_an_append_still_in_flight_is_a_duplicate(store: SegmentStore) -> None:
    await store.create_segment("s")
    w = uuid.uuid4()
    futures = [
        store.append("s", b"one", writer_id=w, event_number=1),
        store.append("s", b"two", writer_id=w, event_number=2),
        store.append("s", b"two", writer_id=w, event_number=2),  # resent before any is durable
        store.append("s", b"three", writer_id=w, event_number=3),
    ]
    results = await asyncio.gather(*futures)
    assert [r.duplicate for r in results] == [False, False, True, False]
    got = store.try_read("s", 0, 1 << 10)
    assert got is not None and bytes(got.data) == b"onetwothree"
    assert store.get_attribute("s", w) == 3
    other = uuid.uuid4()
    assert store.get_attribute("s", other) == NULL_ATTRIBUTE_VALUE
