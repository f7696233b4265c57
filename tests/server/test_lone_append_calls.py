"""A lone AppendBlockEnd through the server's real Connection (issue 19, round 10):
``Appends.writers`` is keyed by the writer id's int, so the session lookup hashes no UUID
in Python; the assembler's own lookup is the one ``UUID.__hash__`` call left. Counted
with the profiler, not timed."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from types import FrameType
from typing import Any

from .harness import harness
from .test_harness import acks, append, first_ack


async def test_a_lone_append_hashes_the_writer_id_once(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        peer, w = await first_ack(h)
        hashes = [0]
        code = uuid.UUID.__hash__.__code__

        def profile(frame: FrameType, event: str, arg: Any) -> None:
            if event == "call" and frame.f_code is code:
                hashes[0] += 1

        sys.setprofile(profile)
        try:
            peer.transport.deliver(append(w, 2, 100))  # one data_received, as a socket read
        finally:
            sys.setprofile(None)
        assert hashes[0] == 1  # AppendAssembler.take_end_only; Appends.block_end used the int
        await peer.until(lambda: len(acks(peer)) == 2, "the second ack")
        assert [a.event_number for a in acks(peer)] == [1, 2]
