"""The two null servers (``scripts/null_server.py`` and ``scripts/null_server.c``) answer
alike, byte for byte, and both survive hostile peers.

* The C server's type table is the protocol registry's (type code, class name, field kinds,
  reply or not, where the request id sits).
* A scripted session (appends, resends, conditional appends, names that need re-encoding,
  refused names, optional fields left out, unsupported requests) gives the same reply bytes
  and the same counters, in the same order, from both.
* Mutated frames (a seeded fuzzer: bytes flipped, payloads cut, lengths and type codes
  changed), each on its own connection after Hello and a SetupAppend, get the same reply
  bytes (or the same silent close) from both. ``NULL_SERVER_FUZZ_CASES`` (default 500)
  and ``NULL_SERVER_FUZZ_SEED`` run more or replay one.
* Hostile input to either (oversized or negative lengths, bodies that run past their frame,
  a half frame then a close, a flood of requests whose replies are never read) ends in a
  closed connection or a paused reader, never a crash or unbounded memory.
"""

from __future__ import annotations

import os
import random
import re
import socket
import struct
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from segmentstore_client.protocol import (
    ConditionalAppend,
    ConditionalBlockEnd,
    CreateSegment,
    CreateTableSegment,
    DataAppended,
    FrameDecoder,
    GetStreamSegmentInfo,
    Hello,
    KeepAlive,
    ReadSegment,
    SealSegment,
    SetupAppend,
    block_end,
    encode,
)
from segmentstore_client.protocol.commands_base import COMMAND_TYPES, Reply

from .test_null_server import SEGMENT, NullServerProcess, Peer, connect, hello, launch, null, record  # noqa: F401
from .test_null_server import c_binary as c_binary

ROOT = Path(__file__).resolve().parents[2]
WRITER = uuid.UUID(int=0x5EED)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_the_c_type_table_is_the_protocol_registry() -> None:
    source = (ROOT / "scripts" / "null_server_wire.h").read_text()
    rows = re.findall(r'\{(-?\d+), "(\w+)", "([^"]*)", ([01]), (-?\d+)\},', source)
    table = {int(t): (name, spec, bool(int(reply)), int(rid)) for t, name, spec, reply, rid in rows}
    expected = {}
    for t, cls in COMMAND_TYPES.items():
        names = [f for f in cls.__dataclass_fields__ if f != "wire_omitted"]
        rid = names.index("request_id") if "request_id" in names else -1
        expected[t] = (cls.__name__, cls.SPEC, issubclass(cls, Reply), rid)
    assert table == expected


@pytest.fixture
def pair(c_binary: Path) -> Iterator[tuple[Callable[[], Peer], ...]]:
    """Both servers side by side: ``(connect_py, connect_c)``; they stop after the test."""
    servers = [launch_one(None), launch_one(c_binary)]
    made: list[Peer] = []

    def connector(server: NullServerProcess) -> Callable[[], Peer]:
        def make() -> Peer:
            made.append(Peer(server.port))
            return made[-1]

        return make

    yield tuple(connector(s) for s in servers)
    for peer in made:
        peer.sock.close()
    counts = [s.stats() for s in servers]
    assert list(counts[0].items()) == list(counts[1].items())  # same counters, same order
    for s in servers:
        assert s.stop() == 0


def launch_one(binary: Path | None) -> NullServerProcess:
    return NullServerProcess("127.0.0.1", 0, 0.1, binary).start()


def exchange(peer: Peer, raw: bytes) -> bytes:
    """Send ``raw``, close our side, and return every byte until the server closes."""
    peer.sock.sendall(raw)
    peer.sock.shutdown(socket.SHUT_WR)
    got = b""
    try:
        while chunk := peer.sock.recv(65536):
            got += chunk
    except ConnectionResetError:
        pass
    return got


def utf(raw: bytes) -> bytes:
    """A writeUTF string from its raw body (any bytes, canonical or not)."""
    return struct.pack(">H", len(raw)) + raw


def frame(type_code: int, payload: bytes) -> bytes:
    return struct.pack(">ii", type_code, len(payload)) + payload


def setup_raw(rid: int, wid: uuid.UUID, name_body: bytes) -> bytes:
    return frame(1, struct.pack(">q", rid) + wid.bytes + utf(name_body) + utf(b""))


SCRIPT: list[bytes] = [
    encode(Hello(15, 5)),
    encode(SetupAppend(1, WRITER, SEGMENT)),
    encode(block_end(WRITER, record(b"a" * 100) * 2, 2, 2, 2)),
    encode(block_end(WRITER, record(b"b"), 1, 3, 3)),
    encode(block_end(WRITER, record(b"b"), 1, 3, 4)),  # a resend
    encode(GetStreamSegmentInfo(5, SEGMENT)),
    encode(GetStreamSegmentInfo(6, "never/written")),
    encode(CreateSegment(7, "made")),
    encode(ConditionalBlockEnd(WRITER, 4, 225, b"xyz", 8)),
    encode(ConditionalBlockEnd(WRITER, 5, 0, b"xyz", 9)),
    encode(CreateTableSegment(10, "t")),
    encode(SealSegment(11, SEGMENT, "")),
    encode(ConditionalAppend(WRITER, 6, 0, b"e", 12)),
    encode(KeepAlive()),
    setup_raw(13, uuid.UUID(int=1), b"a\xc0\x80b"),  # NUL as C0 80: a control character
    setup_raw(14, uuid.UUID(int=2), b"\xf0\x9f\x98\x80/x\x00"),  # 4-byte UTF-8, raw NUL
    setup_raw(15, uuid.UUID(int=3), b"\xed\xa0\xbd\xed\xb8\x80/\x7f"),  # surrogate halves
    setup_raw(16, uuid.UUID(int=4), b"\xc1\x81bc"),  # an overlong "A": keyed as "Abc"
    setup_raw(17, uuid.UUID(int=5), b""),
    setup_raw(18, uuid.UUID(int=6), "é".encode() * 16385),  # over 32 KiB on the wire
    encode(SetupAppend(19, uuid.UUID(int=4), "Abc")),
    encode(GetStreamSegmentInfo(20, "Abc")),
    frame(9, utf(b"Abc") + struct.pack(">qi", 0, 10) + utf(b"")),  # no request id: -1
    frame(20, struct.pack(">q", 21) + utf(b"short") + struct.pack(">ib", 0, 0) + utf(b"")),
]


def test_a_scripted_session_gets_the_same_bytes_from_both(
    pair: tuple[Callable[[], Peer], ...],
) -> None:
    transcripts = []
    for open_peer in pair:
        peer = open_peer()
        got = []
        for raw in SCRIPT:  # one request at a time: each gets exactly one reply
            peer.sock.sendall(raw)
            got.append(read_one(peer))
        transcripts.append(got)
    assert transcripts[0] == transcripts[1]
    replies = [FrameDecoder().feed(raw)[0] for raw in transcripts[1]]
    assert replies[4] == DataAppended(WRITER, 3, 3, 4, 225)  # the resend, not counted
    kinds = [type(r).__name__ for r in replies[14:21]]
    assert kinds == ["ErrorMessage"] * 3 + ["AppendSetup"] + ["ErrorMessage"] * 2 + ["AppendSetup"]
    assert replies[15].message == "control character U+0000 at position 3"  # type: ignore[attr-defined]


def read_one(peer: Peer) -> bytes:
    """Exactly one reply frame's bytes."""
    head = recv_exact(peer.sock, 8)
    (length,) = struct.unpack(">i", head[4:])
    return head + recv_exact(peer.sock, length)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    got = b""
    while len(got) < n:
        chunk = sock.recv(n - len(got))
        assert chunk, f"closed after {got!r}"
        got += chunk
    return got


SAMPLES: list[bytes] = [raw for raw in SCRIPT[1:] if raw[:4] != b"\0\0\0\x09"] + [
    encode(ReadSegment(SEGMENT, 0, 10, "", 30)),
    encode(CreateTableSegment(31, "t")),
    frame(75, struct.pack(">q", 1)),  # a reply type sent to the server
    frame(3, WRITER.bytes + b"x"),  # AppendBlock: no request id
]


def mutate(rng: random.Random, raw: bytes) -> bytes:
    """One frame changed the way a broken or hostile peer would change it."""
    b = bytearray(raw)
    how = rng.randrange(5)
    if how == 0 and len(b) > 8:  # bytes flipped in the payload
        for _ in range(rng.randint(1, 3)):
            b[rng.randrange(8, len(b))] = rng.randrange(256)
    elif how == 1 and len(b) > 8:  # payload cut, header fixed: optional fields left out
        cut = rng.randrange(8, len(b))
        b = b[:cut]
        b[4:8] = struct.pack(">i", cut - 8)
    elif how == 2:  # the length field changed
        b[4:8] = struct.pack(">i", max(0, len(b) - 8 + rng.randint(-6, 6)))
    elif how == 3:  # another type code over the same payload
        b[0:4] = struct.pack(">i", rng.choice(sorted(COMMAND_TYPES)))
    else:  # a string's length prefix or a count changed
        if len(b) > 10:
            at = rng.randrange(8, len(b) - 1)
            b[at : at + 2] = struct.pack(">H", rng.randrange(65536))
    return bytes(b)


def test_mutated_frames_get_the_same_answer_from_both(
    pair: tuple[Callable[[], Peer], ...],
) -> None:
    cases = int(os.environ.get("NULL_SERVER_FUZZ_CASES", "500"))
    seed = int(os.environ.get("NULL_SERVER_FUZZ_SEED", "11"))
    setup = encode(SetupAppend(1, WRITER, SEGMENT))
    transcripts: list[list[bytes]] = []
    for open_peer in pair:
        rng, got = random.Random(seed), []
        for _ in range(cases):
            peer = open_peer()
            hello(peer)
            peer.sock.sendall(setup)
            read_one(peer)
            got.append(exchange(peer, mutate(rng, rng.choice(SAMPLES))))
            peer.sock.close()
        transcripts.append(got)
    for i, (py, c) in enumerate(zip(*transcripts, strict=True)):
        assert py == c, f"case {i} (seed {seed}): python {py.hex()} c {c.hex()}"


# --- hostile peers, against each implementation (the ``null`` fixture is parametrized) ---


def test_hostile_frames_close_the_connection(
    null: NullServerProcess,  # noqa: F811
    connect: Callable[[], Peer],  # noqa: F811
) -> None:
    hostile = [
        frame(4, b"")[:4] + struct.pack(">i", 0x7FFFFFF0),  # oversized: refused on the header
        frame(4, b"")[:4] + struct.pack(">i", -1),
        frame(1, struct.pack(">q", 1) + WRITER.bytes + b"\x03\xe8abc"),  # a string past the end
        setup_raw(2, WRITER, b"\xff"),  # not UTF-8 of any kind
        frame(89, WRITER.bytes + struct.pack(">qqi", 1, 0, -5) + struct.pack(">q", 3)),
    ]
    for raw in hostile:
        peer = connect()
        hello(peer)
        assert peer.closed_without_reply(raw)
    peer = connect()
    hello(peer)  # still serving
    stats = null.stats()
    assert stats["refused:undecodable"] == len(hostile) and stats["connections"] == len(hostile) + 1


def test_half_frames_then_a_close_are_forgotten(
    null: NullServerProcess,  # noqa: F811
    connect: Callable[[], Peer],  # noqa: F811
) -> None:
    rss0 = rss_kib(null.proc.pid)
    for declared, sent in ((1000, 100), (8 << 20, 3 << 20), (0xFFFFF7, 1 << 20)):
        peer = connect()
        hello(peer)
        peer.sock.sendall(struct.pack(">ii", 4, declared) + bytes(sent))
        peer.sock.close()
    peer = connect()
    hello(peer)
    deadline = time.monotonic() + 5
    while rss_kib(null.proc.pid) - rss0 > 16 * 1024 and time.monotonic() < deadline:
        time.sleep(0.05)  # the buffers of the closed connections are given back
    assert rss_kib(null.proc.pid) - rss0 <= 16 * 1024
    stats = null.stats()
    assert stats["connections"] == 4 and "refused" not in stats


def test_a_flood_whose_replies_are_never_read_is_bounded(
    null: NullServerProcess,  # noqa: F811
    connect: Callable[[], Peer],  # noqa: F811
) -> None:
    """A peer that sends KeepAlives and never reads: the server stops reading it once its
    replies back up (the peer's sends then block), its memory stays bounded, and other
    connections are still served."""
    rss0 = rss_kib(null.proc.pid)
    flood = connect()
    hello(flood)
    flood.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    flood.sock.setblocking(False)
    chunk, sent, limit = encode(KeepAlive()) * 8192, 0, 256 << 20
    deadline, stalled = time.monotonic() + 10, 0.0
    while sent < limit and time.monotonic() < deadline:
        try:
            sent += flood.sock.send(chunk)
            stalled = 0.0
        except BlockingIOError:
            stalled = stalled or time.monotonic()
            if time.monotonic() - stalled > 0.3:
                break  # the server no longer reads this connection
            time.sleep(0.01)
    assert sent < limit, "the server kept reading a peer that never reads its replies"
    other = connect()
    hello(other)
    (info,) = other.call(GetStreamSegmentInfo(1, SEGMENT))
    assert info.request_id == 1  # type: ignore[attr-defined]
    assert rss_kib(null.proc.pid) - rss0 < 64 * 1024
    flood.sock.close()
    assert null.stats()["connections"] == 2
