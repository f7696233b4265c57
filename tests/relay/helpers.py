"""Plain-HTTP helpers for the relay tests (aiohttp's client, no SDK on the read side)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

import aiohttp
import segmentstore_client as sc
from segmentstore_client.formats import databus
from segmentstore_client.relay import decode_events


def unique_segment(prefix: str = "relay") -> str:
    return f"{prefix}/s{uuid.uuid4().hex[:10]}/0"


def source_name(segment: str) -> str:
    return segment.replace("/", ".")


async def write(endpoint: str, segment: str, payloads: Sequence[bytes]) -> None:
    async with sc.connect(endpoint) as client:
        await client.create_segment(segment, exist_ok=True)
        async with client.writer(segment) as w:
            for i in range(0, len(payloads), 5000):
                await w.write_many(list(payloads[i : i + 5000]))


def db_windows(windows: int, per_window: int, first_seq: int = 100, src: int = 7) -> list[bytes]:
    """Databus events: window w has sequence first_seq + w and keys w*per_window+k, each
    window closed by an end-of-period marker."""
    out = []
    for w in range(windows):
        seq = first_seq + w
        for k in range(per_window):
            key = w * per_window + k
            ev = databus.DatabusEvent(seq, key, b"value-%d" % key, src, timestamp_ns=seq)
            out.append(databus.encode(ev))
        out.append(databus.encode(databus.end_of_period(seq)))
    return out


async def get(
    port: int, path: str, params: dict[str, str] | None = None, **kw: Any
) -> tuple[int, dict[str, str], bytes]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}{path}", params=params or {}, **kw) as r,
    ):
        return r.status, dict(r.headers), await r.read()


async def stream_all(
    port: int,
    source: str,
    *,
    size: int = 1 << 20,
    output: str = "binary",
    filters: str | None = None,
    checkpoint: str | None = None,
    max_answers: int = 10_000,
) -> tuple[list[databus.DatabusEvent], list[list[databus.DatabusEvent]], str]:
    """Follow checkpoints until no-events (or ``max_answers`` answers); returns (data
    events, each answer's events, final checkpoint)."""
    events: list[databus.DatabusEvent] = []
    answers: list[list[databus.DatabusEvent]] = []
    for _ in range(max_answers):
        params = {"sources": source, "size": str(size), "output": output, "timeout": "0"}
        if checkpoint:
            params["checkPoint"] = checkpoint
        if filters:
            params["filters"] = filters
        status, headers, body = await get(port, "/stream", params)
        assert status == 200, body
        checkpoint = headers["X-Databus-Checkpoint"]
        json.loads(checkpoint)
        if headers.get("X-Databus-Error") == "no-events":
            assert body == b""
            return events, answers, checkpoint
        got = decode_events(body, output == "json")
        answers.append(got)
        events.extend(e for e in got if not e.end_of_period)
    if max_answers < 10_000:
        assert checkpoint is not None
        return events, answers, checkpoint
    raise AssertionError("stream did not reach its end")
