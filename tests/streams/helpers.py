"""Shared checks of the stream tests: read a whole stream segment by segment, in epoch
order (so a key's events come out in the order its segments held them)."""

from __future__ import annotations

import segmentstore_client as sc


async def read_stream(client: sc.Client, stream: str) -> dict[int, list[str]]:
    """Every event of every segment, keyed by segment id, segments in epoch order."""
    info = await client.stream_info(stream)
    out: dict[int, list[str]] = {}
    for sid in sorted(info.segments, key=lambda s: (s >> 32, s & 0xFFFFFFFF)):
        out[sid] = [ev.data.decode() async for ev in client.reader(info.segments[sid].name)]
    return out


def per_key(events: dict[int, list[str]]) -> dict[str, list[int]]:
    """``key:n`` events -> the numbers of each key in read order."""
    seen: dict[str, list[int]] = {}
    for lines in events.values():
        for line in lines:
            key, _, n = line.rstrip(".").rpartition(":")
            seen.setdefault(key, []).append(int(n))
    return seen
