"""A mutation fuzzer over the official client's frames (``shared/protocol/vectors``) against
a live server (issue 13): each input is a run of one connection's client frames with a few
mutations (bit flips, random bytes, edited lengths and type codes, interesting numbers,
cuts, splices), sent on a fresh connection after Hello and followed by KeepAlive. After
all inputs: the server is up, never logged a traceback or an internal error, a good client
works, and a restart recovers.

3,000 inputs in CI (about 20 s); SEGMENTSTORE_TEST_FUZZ_INPUTS=100000 for a longer run and
SEGMENTSTORE_TEST_FUZZ_SEED to replay one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import struct
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from protocol.helpers import load_frames, streams, trace_files
from segmentstore_client.protocol import Hello, KeepAlive, block_end, encode, frame_event
from segmentstore_client.protocol.commands import DECODERS
from server.wire import WireClient, next_id, parse_events, unique

from segmentstore.server.launcher import ServerProcess

HEADER = struct.Struct(">ii")
HELLO = encode(Hello(17, 5))
KEEPALIVE = encode(KeepAlive())
INTERESTING = [0, 1, -1, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63), 0xFFFF, 0x10000]
MAX_FRAME = 64 * 1024


def corpus() -> list[list[bytes]]:
    """Each connection's client-to-server frames, in order (frames over 64 KiB left out)."""
    frames = [f for p in trace_files() for f in load_frames(p, rebuild_elided=False)]
    runs = []
    for (_, _, direction), fs in streams(frames).items():
        data = [f.data for f in fs if len(f.data) <= MAX_FRAME and f.type_code != 1]
        if direction == "C>S" and data:
            runs.append(data)
    return runs


def flip(rng: random.Random, b: bytearray) -> None:
    i = rng.randrange(len(b))
    b[i] ^= 1 << rng.randrange(8)


def poke(rng: random.Random, b: bytearray) -> None:
    b[rng.randrange(len(b))] = rng.randrange(256)


def length(rng: random.Random, b: bytearray) -> None:
    if len(b) >= 8:
        n = struct.unpack_from(">i", b, 4)[0]
        choice = rng.choice([n + rng.randint(-9, 9), rng.choice(INTERESTING) & 0x7FFFFFFF, 0])
        struct.pack_into(">i", b, 4, max(-(2**31), min(2**31 - 1, choice)))


def retype(rng: random.Random, b: bytearray) -> None:
    if len(b) >= 8:
        struct.pack_into(">i", b, 0, rng.choice(list(DECODERS)))


def number(rng: random.Random, b: bytearray) -> None:
    if len(b) >= 16:
        pos = rng.randrange(8, len(b) - 7)
        struct.pack_into(">q", b, pos, rng.choice(INTERESTING))


def insert(rng: random.Random, b: bytearray) -> None:
    pos = rng.randrange(len(b) + 1)
    b[pos:pos] = rng.randbytes(rng.randint(1, 16))


def cut(rng: random.Random, b: bytearray) -> None:
    del b[rng.randrange(len(b)) :]


MUTATORS: list[Callable[[random.Random, bytearray], None]] = [
    flip,
    poke,
    length,
    retype,
    number,
    insert,
    cut,
]


def make_input(rng: random.Random, runs: list[list[bytes]]) -> bytes:
    run = rng.choice(runs)
    start = rng.randrange(len(run))
    frames = [bytearray(f) for f in run[start : start + rng.randint(1, 6)]]
    if rng.random() < 0.1:  # splice in a frame from another connection
        frames.insert(rng.randrange(len(frames) + 1), bytearray(rng.choice(rng.choice(runs))))
    for _ in range(rng.randint(1, 3)):
        target = rng.choice(frames)
        if target:
            rng.choice(MUTATORS)(rng, target)
    return HELLO + b"".join(frames) + KEEPALIVE


async def send_one(host: str, port: int, data: bytes) -> None:
    """Send one input; wait for the server to close, to answer the KeepAlive, or 0.3 s."""
    r, w = await asyncio.open_connection(host, port)
    try:
        w.write(data)
        deadline = time.monotonic() + 0.3
        got = b""
        with contextlib.suppress(ConnectionError, TimeoutError):
            while not got.endswith(KEEPALIVE):
                chunk = await asyncio.wait_for(r.read(1 << 16), deadline - time.monotonic())
                if not chunk:
                    break
                got = got[-64:] + chunk
    finally:
        w.close()


async def test_fuzz_server_with_mutated_client_frames(tmp_path: Path) -> None:
    inputs = int(os.environ.get("SEGMENTSTORE_TEST_FUZZ_INPUTS", "3000"))
    seed = int(os.environ.get("SEGMENTSTORE_TEST_FUZZ_SEED", str(random.randrange(1 << 30))))
    rng = random.Random(seed)
    runs = corpus()
    assert len(runs) >= 10
    server = ServerProcess(tmp_path / "data", http_port=-1)
    server.start()
    try:
        host, port = server.host, server.port
        async with await WireClient.connect(host, port) as good:
            name = unique("fuzz")
            await good.create_segment(name)
            w = uuid.uuid4()
            await good.setup_append(w, name)
            sem = asyncio.Semaphore(64)

            async def bounded(data: bytes) -> None:
                async with sem:
                    await send_one(host, port, data)

            n = 0
            for batch_start in range(0, inputs, 500):
                batch = [make_input(rng, runs) for _ in range(min(500, inputs - batch_start))]
                await asyncio.gather(*(bounded(d) for d in batch))
                assert server.running, f"seed {seed}: server died:\n" + "".join(server.log[-30:])
                n += 1
                good.send(block_end(w, frame_event(b"ok %d" % n), 1, n, next_id()))
                await good.wait_acked(w, n, timeout=10)
                await good.keepalive()
        bad = [x for x in server.log if "Traceback" in x or "internal error" in x]
        assert not bad, f"seed {seed}:\n" + "".join(server.log[-60:])
        assert server.stop() == 0
        server.start()
        async with await WireClient.connect(server.host, server.port) as again:
            assert len(parse_events(await again.read_all(name))) == n
    finally:
        server.kill()
