"""Hostile load for the adversarial test, run as its own process (so that its work does
not slow the good client's event loop): ``python hostile.py HOST PORT SEGMENT SECONDS
CONNECTIONS``. It opens CONNECTIONS connections, a fifth of each kind:

* half: Hello, then 64 KiB of a frame that declares 1 MiB, then silence;
* mute: Hello, 20 ReadSegment of 2 MiB each, and never reads a byte of the replies;
* slowloris: one byte of a Hello frame every 0.5 s, never a whole frame;
* flood: Hello and 200 ReadSegments of 2 MiB at once, replies read slowly;
* junk: random bytes; reconnects a second after the server closes, until the time is up.

It prints one JSON line of counts at the end, and exits after SECONDS (plus closing).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import struct
import sys
import time

from segmentstore_client.protocol import Hello, ReadSegment, encode

HEADER = struct.Struct(">ii")
MiB = 1024 * 1024
HELLO = encode(Hello(17, 5))
KINDS = ("half", "mute", "slowloris", "flood", "junk")


async def half(host: str, port: int, segment: str, until: float, stats: dict[str, int]) -> None:
    r, w = await asyncio.open_connection(host, port)
    w.write(HELLO + HEADER.pack(11, MiB) + b"\0" * (64 * 1024))
    await _hold(r, until, stats, "half")
    w.close()


async def mute(host: str, port: int, segment: str, until: float, stats: dict[str, int]) -> None:
    _, w = await asyncio.open_connection(host, port)
    w.transport.pause_reading()
    reads = [encode(ReadSegment(segment, (i % 4) * 2 * MiB, 2 * MiB, "", i)) for i in range(20)]
    w.write(HELLO + b"".join(reads))
    await asyncio.sleep(max(0.0, until - time.monotonic()))
    stats["mute"] += 1
    w.close()


async def slowloris(
    host: str, port: int, segment: str, until: float, stats: dict[str, int]
) -> None:
    r, w = await asyncio.open_connection(host, port)
    with contextlib.suppress(ConnectionError):
        for byte in HELLO[:-1]:
            if time.monotonic() > until or r.at_eof():
                break
            w.write(bytes([byte]))
            await asyncio.sleep(0.5)
    await _hold(r, until, stats, "slowloris")
    w.close()


async def flood(host: str, port: int, segment: str, until: float, stats: dict[str, int]) -> None:
    """200 ReadSegments of 2 MiB at once, then the replies read slowly (64 KiB / 100 ms)."""
    r, w = await asyncio.open_connection(host, port, limit=4 * MiB)
    reads = [encode(ReadSegment(segment, (i % 4) * 2 * MiB, 2 * MiB, "", i)) for i in range(200)]
    w.write(HELLO + b"".join(reads))
    with contextlib.suppress(ConnectionError, TimeoutError):
        while time.monotonic() < until:
            data = await asyncio.wait_for(r.read(64 * 1024), max(0.01, until - time.monotonic()))
            if not data:
                break
            stats["flood_bytes"] += len(data)
            await asyncio.sleep(0.1)
    w.close()


async def junk(host: str, port: int, segment: str, until: float, stats: dict[str, int]) -> None:
    rng = random.Random()
    while time.monotonic() < until:
        r, w = await asyncio.open_connection(host, port)
        w.write(HEADER.pack(rng.choice([7777, -99, 13, 1]), rng.randint(-5, 10**9)))
        w.write(rng.randbytes(rng.randint(0, 4000)))
        with contextlib.suppress(ConnectionError, TimeoutError):
            await asyncio.wait_for(r.read(), max(0.01, until - time.monotonic()))
        stats["junk_closed"] += 1
        w.close()
        await asyncio.sleep(1.0)


async def _hold(r: asyncio.StreamReader, until: float, stats: dict[str, int], kind: str) -> None:
    """Wait for the server to close (EOF or reset) until the time is up (plus 5 s of
    grace: on a loaded machine the last connections open late)."""
    try:
        while await asyncio.wait_for(r.read(1 << 16), max(0.01, until + 5 - time.monotonic())):
            pass
    except TimeoutError:
        return
    except ConnectionError:
        pass
    stats[f"{kind}_closed_by_server"] += 1


async def main(host: str, port: int, segment: str, seconds: float, n: int) -> None:
    until = time.monotonic() + seconds
    stats: dict[str, int] = dict.fromkeys(
        ("mute", "flood_bytes", "junk_closed", "errors", "connected"), 0
    )
    for kind in ("half", "slowloris"):
        stats[f"{kind}_closed_by_server"] = 0
    tasks = []
    runners = {"half": half, "mute": mute, "slowloris": slowloris, "flood": flood, "junk": junk}
    for i in range(n):
        kind = KINDS[i % len(KINDS)]
        tasks.append(asyncio.create_task(runners[kind](host, port, segment, until, stats)))
        if i % 50 == 49:
            await asyncio.sleep(0.01)  # do not overrun the listen backlog
    results = await asyncio.gather(*tasks, return_exceptions=True)
    stats["errors"] = sum(isinstance(x, BaseException) for x in results)
    stats["connected"] = n
    print(json.dumps(stats), flush=True)


if __name__ == "__main__":
    host, port, segment, seconds, count = sys.argv[1:6]
    asyncio.run(main(host, int(port), segment, float(seconds), int(count)))
