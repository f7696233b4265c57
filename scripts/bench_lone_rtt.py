#!/usr/bin/env python3
"""A lone append's round trip: a bare blocking socket against the SDK, one server, one run.

Starts ``segmentstore serve`` (fsync=always unless told otherwise), then alternates, for
``--rounds`` rounds, two clients each appending ``--events`` events of ``--size`` bytes one
at a time to its own segment and waiting for each acknowledgement:

* raw socket   a blocking socket (TCP_NODELAY): ``Hello``, ``SetupAppend``, then one
               end-only ``AppendBlockEnd`` per event, read until its ``DataAppended``;
               the frames come from the SDK's codec, encoded before the clock starts
* SDK          ``await (await writer.write(p))`` on uvloop when installed (as
               ``bench_peers.py`` and ``bench_latency.py`` run it)

and prints the ack p50 / p99 of each, per round, and the SDK's p50 minus the raw socket's
p50 (what the SDK adds to a lone event over a bare socket, paired by round). With
``--follow`` each round runs twice more per client with a tailing reader (the SDK's
``reader(follow=True)``) in another process on the segment being written, as in
``bench_peers.py``: the ack's cost of a consumer being woken by every event. Figures move
by tens of microseconds between rounds on a shared machine: compare within a round.

    .venv/bin/python scripts/bench_lone_rtt.py
    .venv/bin/python scripts/bench_lone_rtt.py --events 5000 --rounds 5 --fsync never

Run it from another checkout (``PYTHONPATH=<tree>:<tree>/client``) to measure that code.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing as mp
import socket
import struct
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "client"))
sys.path.insert(0, str(ROOT))

import segmentstore_client as sc  # noqa: E402
from segmentstore_client.protocol import codec  # noqa: E402
from segmentstore_client.protocol.commands_data import (  # noqa: E402
    AppendBlockEnd,
    Hello,
    SetupAppend,
)
from segmentstore_client.protocol.events import frame_event  # noqa: E402

from segmentstore.server.launcher import ServerProcess  # noqa: E402

TIMEOUT = 30.0


def percentiles(xs: list[float]) -> tuple[float, float]:
    """(p50, p99) in microseconds."""
    s = sorted(xs)
    return s[len(s) // 2] * 1e6, s[min(len(s) - 1, int(len(s) * 0.99))] * 1e6


def _frame(sock: socket.socket, buf: bytearray) -> bytes:
    """One whole frame from ``sock`` (``buf`` keeps what arrived after it)."""
    while True:
        if len(buf) >= 8:
            length = struct.unpack_from(">i", buf, 4)[0]
            if length < 0 or length > 1 << 24:
                raise ValueError(f"bad frame length {length}")
            if len(buf) >= 8 + length:
                frame = bytes(buf[: 8 + length])
                del buf[: 8 + length]
                return frame
        data = sock.recv(65536)
        if not data:
            raise EOFError("the server closed the connection")
        buf += data


def raw_round(
    port: int, segment: str, events: int, size: int, sent: list[float] | None = None
) -> list[float]:
    """Ack latencies of a bare blocking socket appending ``events`` lone events (and the
    ``perf_counter`` each was sent at, into ``sent`` if given)."""
    writer = uuid.uuid4()
    record = frame_event(b"x" * size)
    frames = [
        codec.encode(
            AppendBlockEnd(
                writer_id=writer,
                size_of_whole_events=len(record),
                data=record,
                num_events=1,
                last_event_number=n,
                request_id=n,
            )
        )
        for n in range(1, events + 1)
    ]
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = bytearray()
        sock.sendall(codec.encode(Hello(high_version=15, low_version=5)))
        _frame(sock, buf)
        sock.sendall(codec.encode(SetupAppend(request_id=0, writer_id=writer, segment=segment)))
        _frame(sock, buf)
        out = []
        clock = time.perf_counter
        for frame in frames:
            t = clock()
            sock.sendall(frame)
            _frame(sock, buf)
            out.append(clock() - t)
            if sent is not None:
                sent.append(t)
    return out


async def sdk_round(endpoint: str, segment: str, events: int, size: int) -> list[float]:
    """Ack latencies of the SDK's writer appending ``events`` lone events."""
    client = await sc.connect(endpoint)
    try:
        writer = client.writer(segment)
        await writer.start()
        payload = b"x" * size
        out = []
        clock = time.perf_counter
        for _ in range(events):
            t = clock()
            await (await writer.write(payload))
            out.append(clock() - t)
        await writer.close()
        return out
    finally:
        await client.close()


async def _follow(endpoint: str, segment: str, ready: Any, stop: Any) -> None:
    async with sc.connect(endpoint) as client:
        reader = client.reader(segment, follow=True)
        ready.set()
        async for _event in reader:
            if stop.is_set():
                break
        await reader.close()


def follow_main(endpoint: str, segment: str, ready: Any, stop: Any) -> None:
    asyncio.run(_follow(endpoint, segment, ready, stop))


@contextlib.contextmanager
def follower(endpoint: str, segment: str, on: bool) -> Iterator[None]:
    """A tailing reader of ``segment`` in another process while the block runs (if ``on``)."""
    if not on:
        yield
        return
    ctx = mp.get_context("spawn")
    ready, stop = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=follow_main, args=(endpoint, segment, ready, stop))
    proc.start()
    try:
        if not ready.wait(TIMEOUT):
            raise RuntimeError("the follower did not start")
        time.sleep(0.2)  # its first read parked at the tail
        yield
    finally:
        stop.set()
        proc.join(2)
        if proc.is_alive():
            proc.kill()
            proc.join()


async def create(endpoint: str, names: list[str]) -> None:
    client = await sc.connect(endpoint)
    try:
        for name in names:
            await client.create_segment(name)
    finally:
        await client.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--events", type=int, default=2000, help="lone events per client and round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--size", type=int, default=100, help="event size in bytes")
    p.add_argument("--fsync", default="always", choices=("always", "interval", "never"))
    p.add_argument("--follow", action="store_true", help="also each client with a tailing reader")
    a = p.parse_args()
    if a.events < 1 or a.rounds < 1 or a.size < 0:
        p.error("--events and --rounds must be >= 1 and --size >= 0")
    try:
        import uvloop

        new_loop = uvloop.new_event_loop
    except ImportError:
        new_loop = asyncio.new_event_loop
    with tempfile.TemporaryDirectory() as tmp:
        server = ServerProcess(Path(tmp), ["--fsync", a.fsync], http_port=-1)
        server.start()
        try:
            asyncio.run(create(server.endpoint, ["rtt/raw/0", "rtt/sdk/0"]))
            print(f"fsync={a.fsync}, {a.events} lone events of {a.size} B per client and round")
            for r in range(1, a.rounds + 1):
                for follow in (False, True) if a.follow else (False,):
                    with follower(server.endpoint, "rtt/raw/0", follow):
                        raw = percentiles(raw_round(server.port, "rtt/raw/0", a.events, a.size))
                    with (
                        follower(server.endpoint, "rtt/sdk/0", follow),
                        asyncio.Runner(loop_factory=new_loop) as runner,
                    ):
                        lat = runner.run(sdk_round(server.endpoint, "rtt/sdk/0", a.events, a.size))
                    sdk = percentiles(lat)
                    print(
                        f"round {r}{' follow' if follow else '       '}: "
                        f"raw socket p50 {raw[0]:5.0f} us p99 {raw[1]:6.0f} us | "
                        f"SDK p50 {sdk[0]:5.0f} us p99 {sdk[1]:6.0f} us | "
                        f"SDK - raw p50 {sdk[0] - raw[0]:+5.0f} us"
                    )
        finally:
            server.stop()


if __name__ == "__main__":
    main()
