"""The null data server of ``scripts/bench_streams.py --ceiling``, in both implementations
(``scripts/null_server.py`` and ``scripts/null_server.c``, every behaviour test runs
against each): it answers the official client's append path with the right offsets and
event numbers, refuses what the real server refuses, stops by itself, survives hostile
peers with bounded memory, and the benchmark's wiring (a real controller whose getURI
points at it) really sends an official client's events there. The C server's replies and
counters are compared byte for byte with the Python one's (``test_null_server_parity.py``)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from segmentstore_client.protocol import (
    AppendSetup,
    Command,
    ConditionalBlockEnd,
    ConditionalCheckFailed,
    CreateTableSegment,
    DataAppended,
    ErrorMessage,
    FrameDecoder,
    GetStreamSegmentInfo,
    Hello,
    OperationUnsupported,
    ReadSegment,
    SegmentRead,
    SetupAppend,
    StreamSegmentInfo,
    block_end,
    encode,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from bench_streams import child, null_backends
from null_server import MAX_HELD_READS, NEW_WRITER, NullServerProcess, build_c_server, c_compiler

SEGMENT = "bench/s/0.#epoch.0"
IMPLS = ("python", "c")


@pytest.fixture(scope="session")
def c_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``null_server.c`` built once with ``cc -O2`` (a warning fails the build)."""
    if c_compiler() is None and os.environ.get("CI") != "true":
        pytest.skip("no C compiler (cc) on PATH: the C null server cannot be built")
    return build_c_server(tmp_path_factory.mktemp("null-c"))


@pytest.fixture(params=IMPLS)
def launch(request: pytest.FixtureRequest) -> Callable[..., NullServerProcess]:
    """``launch(host, port, read_hold)``: an unstarted null server of this implementation."""
    binary = request.getfixturevalue("c_binary") if request.param == "c" else None

    def make(host: str = "127.0.0.1", port: int = 0, read_hold: float = 10.0) -> NullServerProcess:
        return NullServerProcess(host, port, read_hold, binary)

    return make


def record(payload: bytes) -> bytes:
    """One event as the official writer frames it in a block (type 0, length, payload)."""
    return b"\0\0\0\0" + len(payload).to_bytes(4, "big") + payload


class Peer:
    """A raw-socket client speaking the wire protocol to the null server."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.decoder = FrameDecoder()

    def call(self, *commands: Command) -> list[Command]:
        """Send ``commands`` in one write and wait for as many replies."""
        self.sock.sendall(b"".join(encode(c) for c in commands))
        out: list[Command] = []
        while len(out) < len(commands):
            data = self.sock.recv(65536)
            assert data, f"closed after {out}"
            out += self.decoder.feed(data)
        return out

    def closed_without_reply(self, raw: bytes) -> bool:
        self.sock.sendall(raw)
        try:
            return self.sock.recv(65536) == b""
        except ConnectionResetError:
            return True


@pytest.fixture
def null(launch: Callable[..., NullServerProcess]) -> Iterator[NullServerProcess]:
    server = launch("127.0.0.1", 0, read_hold=0.2).start()
    yield server
    assert server.stop() == 0


@pytest.fixture
def connect(null: NullServerProcess) -> Iterator[Callable[[], Peer]]:
    """Connections to ``null``, closed after the test."""
    made: list[Peer] = []

    def make() -> Peer:
        made.append(Peer(null.port))
        return made[-1]

    yield make
    for peer in made:
        peer.sock.close()


def hello(peer: Peer) -> None:
    assert peer.call(Hello(15, 5)) == [Hello(17, 5)]


def test_appends_get_data_appended_with_the_segment_offsets(
    null: NullServerProcess, connect: Callable[[], Peer]
) -> None:
    peer, wid = connect(), uuid.uuid4()
    hello(peer)
    assert peer.call(SetupAppend(1, wid, SEGMENT)) == [AppendSetup(1, SEGMENT, wid, NEW_WRITER)]
    two, one = record(b"a" * 100) * 2, record(b"b" * 7)
    replies = peer.call(block_end(wid, two, 2, 2, 2), block_end(wid, one, 1, 3, 3))
    assert replies == [
        DataAppended(wid, 2, NEW_WRITER, 2, 216),
        DataAppended(wid, 3, 2, 3, 231),
    ]
    # A block resent after a reconnect is acknowledged again and not counted twice.
    again = connect()
    hello(again)
    assert again.call(SetupAppend(4, wid, SEGMENT)) == [AppendSetup(4, SEGMENT, wid, 3)]
    assert again.call(block_end(wid, one, 1, 3, 5)) == [DataAppended(wid, 3, 3, 5, 231)]
    info = again.call(GetStreamSegmentInfo(6, SEGMENT))[0]
    assert isinstance(info, StreamSegmentInfo) and info.write_offset == 231
    # A byte stream's conditional append: at the tail it lands, elsewhere it is refused.
    bw = uuid.uuid4()
    assert again.call(SetupAppend(7, bw, SEGMENT))[0] == AppendSetup(7, SEGMENT, bw, NEW_WRITER)
    assert again.call(ConditionalBlockEnd(bw, 1, 231, b"xyz", 8)) == [
        DataAppended(bw, 1, NEW_WRITER, 8, 234)
    ]
    assert again.call(ConditionalBlockEnd(bw, 2, 0, b"xyz", 9)) == [
        ConditionalCheckFailed(bw, 2, 9)
    ]
    stats = null.stats()
    assert (stats["blocks"], stats["events"], stats["resent_blocks"]) == (2, 3, 1)
    assert (stats["conditional_blocks"], stats["conditional_failed"]) == (1, 1)
    assert stats["bytes"] == 234 and stats["SetupAppend"] == 3


def test_a_read_is_held_then_answered_empty_at_the_tail(
    null: NullServerProcess, connect: Callable[[], Peer]
) -> None:
    peer = connect()
    hello(peer)
    t0 = time.monotonic()
    reply = peer.call(ReadSegment(SEGMENT, 0, 4096, "", 11))[0]
    assert time.monotonic() - t0 >= 0.15
    assert reply == SegmentRead(SEGMENT, 0, True, False, b"", 11)
    # Several held at once are answered in the order they came.
    reads = [ReadSegment(SEGMENT, 7, 10, "", rid) for rid in (14, 12, 13, 15)]
    assert peer.call(*reads) == [
        SegmentRead(SEGMENT, 7, True, False, b"", r.request_id) for r in reads
    ]


def test_more_held_reads_than_the_bound_close_the_connection(
    null: NullServerProcess, connect: Callable[[], Peer]
) -> None:
    peer = connect()
    hello(peer)
    reads = b"".join(encode(ReadSegment(SEGMENT, 0, 10, "", i)) for i in range(MAX_HELD_READS))
    peer.sock.sendall(reads)
    assert null.stats().get("refused", 0) == 0  # the bound itself is allowed
    assert peer.closed_without_reply(encode(ReadSegment(SEGMENT, 0, 10, "", 99)))
    assert null.stats()["refused:too many reads"] == 1


def test_a_delay_holds_every_reply_in_order(
    null: NullServerProcess, connect: Callable[[], Peer]
) -> None:
    null.delay(0.2)
    peer, wid = connect(), uuid.uuid4()
    t0 = time.monotonic()
    hello(peer)
    assert time.monotonic() - t0 >= 0.15
    t0 = time.monotonic()
    replies = peer.call(SetupAppend(1, wid, SEGMENT), block_end(wid, record(b"z"), 1, 1, 2))
    assert time.monotonic() - t0 >= 0.15
    assert replies == [AppendSetup(1, SEGMENT, wid, NEW_WRITER), DataAppended(wid, 1, NEW_WRITER, 2, 9)]  # fmt: skip
    null.delay(0)
    assert peer.call(GetStreamSegmentInfo(3, SEGMENT))[0] == StreamSegmentInfo(3, SEGMENT, True, False, False, 0, 9)  # fmt: skip


def test_bad_requests_get_the_protocols_answer(
    null: NullServerProcess, connect: Callable[[], Peer]
) -> None:
    peer = connect()
    hello(peer)
    (bad,) = peer.call(SetupAppend(1, uuid.uuid4(), "a\0b"))
    assert isinstance(bad, ErrorMessage) and bad.request_id == 1
    assert peer.call(CreateTableSegment(2, "t")) == [OperationUnsupported(2, "CreateTableSegment")]
    # Closed without a reply: an unknown type code, an append from a writer never set up,
    # a block whose size field disagrees with its data, a first frame that is not Hello.
    assert connect().closed_without_reply(b"\0\0\0\x63\0\0\0\0")
    stranger = connect()
    hello(stranger)
    blk = encode(block_end(uuid.uuid4(), record(b"x"), 1, 1, 3))
    assert stranger.closed_without_reply(blk)
    liar, wid = connect(), uuid.uuid4()
    hello(liar)
    liar.call(SetupAppend(4, wid, SEGMENT))
    lie = block_end(wid, record(b"x"), 1, 1, 5)
    frame = bytearray(encode(lie))
    frame[24:28] = (99).to_bytes(4, "big")  # sizeOfWholeEvents, after header and writer id
    assert liar.closed_without_reply(bytes(frame))
    assert connect().closed_without_reply(encode(GetStreamSegmentInfo(6, SEGMENT)))
    stats = null.stats()
    assert stats["refused"] == 4 and "blocks" not in stats


def test_it_stops_by_itself_when_its_parent_goes_away(
    launch: Callable[..., NullServerProcess],
) -> None:
    server = launch("127.0.0.1", 0).start()
    assert server.proc.stdin is not None
    server.proc.stdin.close()  # what the parent's death does
    assert server.proc.wait(10) == 0
    assert server.stop() == 0


def test_control_lines_it_cannot_read_are_refused_in_one_line(
    launch: Callable[..., NullServerProcess],
) -> None:
    server = launch("127.0.0.1", 0).start()
    assert server.proc.stdin is not None and server.proc.stderr is not None
    server.proc.stdin.write("delay abc\ndelay nan\ndelay inf\n")
    server.proc.stdin.flush()
    server.delay(0.25)  # still reading its lines, and the bad ones changed nothing
    server.delay(0)
    assert server.stats() == {}
    _, err = server.proc.communicate(timeout=10)  # closes its stdin: it stops
    bad = [f"null_server: not a number of seconds: {x}" for x in ("abc", "nan", "inf")]
    assert err.splitlines() == bad
    assert server.stop() == 0
    argv = server.proc.args
    # Standard input that is not a pipe (a file, /dev/null): its lines, then it stops.
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)  # fmt: skip
    assert done.returncode == 0 and done.stdout.splitlines()[1:] == ["{}"], done


def test_it_listens_on_loopback_only(launch: Callable[..., NullServerProcess]) -> None:
    with pytest.raises(RuntimeError, match="loopback only"):
        launch("0.0.0.0", 0).start()


@pytest.mark.parametrize("impl", IMPLS)
def test_the_benchmark_sends_the_official_clients_events_to_it(
    impl: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """``bench_streams.py --ceiling``'s wiring: the official client (in a child process)
    asks the real controller, which hands out the null server's address; every event of
    the stream row and every byte of the byte-writer row arrive there, none in the store."""
    binary = request.getfixturevalue("c_binary") if impl == "c" else None
    (backend,), ctl, null = null_backends("never", tmp_path, [], binary)
    assert backend.label == ("null-py" if impl == "python" else "null-c")
    try:
        before = backend.sample()
        job = {"uri": backend.uri, "events": 3000, "size": 100, "segments": 2}
        r = child({**job, "op": "write", "stream": "w", "inflight": 100})
        mid = backend.sample()  # raises if the controller's own store saw an append
        child({**job, "op": "bytes", "stream": "b"})
        after = backend.sample()
    finally:
        null.stop()
        ctl.kill()
    assert float(r["seconds"]) > 0  # type: ignore[arg-type]
    assert mid["events"] - before["events"] == 3000 + 64  # the timed events + one per key
    assert mid["bytes"] - before["bytes"] == (3000 + 64) * 108
    assert after["bytes"] - mid["bytes"] == (3000 + 2) * 100  # + one warm-up write each
    assert after["events"] == mid["events"]  # byte writers send conditional blocks only
