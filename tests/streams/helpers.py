"""Shared checks of the stream tests: read a whole stream segment by segment, in epoch
order (so a key's events come out in the order its segments held them)."""

from __future__ import annotations

import asyncio

import segmentstore_client as sc
from segmentstore_client.streams.stream_writer import StreamWriter


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


async def write_rounds(w: StreamWriter, keys: int, rounds: int, pause: float = 0.0) -> None:
    """``rounds`` rounds of one ``k<i>:<n>`` event per key, routed by key."""
    for n in range(rounds):
        await w.write_many(
            [f"k{i}:{n}".encode() for i in range(keys)],
            routing_keys=[f"k{i}" for i in range(keys)],
        )
        if pause:
            await asyncio.sleep(pause)


async def scale_steps(client: sc.Client, stream: str, plan: list[int], every: float) -> None:
    """Scale ``stream`` to each segment count of ``plan``, ``every`` seconds apart."""
    for count in plan:
        await asyncio.sleep(every)
        await client.scale_stream(stream, count)
