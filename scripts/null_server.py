#!/usr/bin/env python3
"""A null data server: the segment store's wire protocol with nothing behind it.

What it is for: ``scripts/bench_streams.py --ceiling`` points the official client's data
path here (a real ``segmentstore serve`` still runs the gRPC controller and hands out
this server's address through ``getURI``), so the client's rate against a server that
costs nothing, its ceiling, is measured rather than projected.

Contract (the requests the official Pravega client sends on its writer and byte-stream
paths, official-client.md sections 3, 4, 7 and 14):

* Hello first, answered with Hello(WIRE_VERSION, OLDEST_COMPATIBLE_VERSION); anything
  else first closes the connection without a reply, as the real server does.
* SetupAppend -> AppendSetup with the writer's last event number on that segment
  (Long.MIN_VALUE for a new writer); a name ``name_problem`` refuses gets ErrorMessage.
* AppendBlockEnd -> DataAppended at once; the segment's offset advances by the block's
  bytes. A block resent with an event number already acknowledged is acknowledged again
  without advancing (the client's resend after a reconnect).
* ConditionalBlockEnd -> DataAppended when ``expectedOffset`` is the segment's offset,
  else ConditionalCheckFailed (a byte stream's conditional append).
* GetStreamSegmentInfo -> StreamSegmentInfo with the offset counted so far; CreateSegment
  -> SegmentCreated; KeepAlive -> KeepAlive.
* ReadSegment: nothing is stored, so there is never data to read: the read is held for
  ``--read-hold`` seconds (the real server's tail-read timeout is 10 s) and answered
  with an empty SegmentRead(atTail=true), as the real server answers a tail read that
  saw no new data. The byte stream's prefetching reader sends one at creation. More
  than ``MAX_HELD_READS`` held at once close the connection.
* Bounded: frames by the decoder's maximum; output by not reading the socket while the
  transport is over its high-water mark or ``MAX_DELAYED`` batches of replies are held.
* Any other request carrying a request id gets OperationUnsupported; a decoding error, a
  reply-type command, an append from a writer not set up on this connection or a block
  whose size field disagrees with its data closes the connection without a reply.

Nothing is written anywhere: offsets and last event numbers are counters in memory.
Counters of everything answered are printed as one JSON line on stdout for each line
``stats`` read on stdin, so a benchmark can check that its traffic really came here. A
line ``delay SECONDS`` makes every later reply wait that long (replies of one connection
stay in order): a server whose only cost is a fixed latency, for sweeping the client's
rate against the server's ack time; a number it cannot take (not finite, not a number)
gets one error line on stderr and changes nothing.
The process stops by itself when stdin closes (its parent went away) or after
``--max-seconds``. Ready line on stdout: ``null server listening on HOST:PORT``.
A request whose segment name no reply can carry (over 65,535 bytes once re-encoded)
closes the connection ("unencodable").

``scripts/null_server.c`` (its wire checks in ``null_server_wire.h``) is the same server
in C (one thread, epoll), with the same command line, lines and replies byte for byte:
``build_c_server`` compiles it with ``cc -O2`` and ``NullServerProcess(binary=...)`` runs
it; tests/streams/test_null_server.py runs every behaviour test against both, and
test_null_server_parity.py compares their bytes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import select
import shutil
import stat
import subprocess
import sys
import uuid
from collections import Counter, deque
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "client"))

from segmentstore_client.errors import RemoteProtocolError
from segmentstore_client.protocol import (
    MAX_PAYLOAD_TO_SERVER,
    OLDEST_COMPATIBLE_VERSION,
    WIRE_VERSION,
    AppendBlockEnd,
    AppendSetup,
    Command,
    ConditionalBlockEnd,
    ConditionalCheckFailed,
    CreateSegment,
    ErrorMessage,
    FrameDecoder,
    GetStreamSegmentInfo,
    Hello,
    KeepAlive,
    OperationUnsupported,
    ReadSegment,
    Reply,
    SegmentCreated,
    SegmentRead,
    SetupAppend,
    StreamSegmentInfo,
    data_appended_frame,
    encode,
)
from segmentstore_client.protocol.names import name_problem, wire_length

NEW_WRITER = -(2**63)  # Long.MIN_VALUE: the writer is unknown on this segment
MAX_HELD_READS = 64  # reads held at once per connection; one more closes it
MAX_DELAYED = 4096  # batches of replies held per connection before it stops reading


ECHOING = (SetupAppend, GetStreamSegmentInfo, CreateSegment, ReadSegment)  # name in the reply


class NullStore:
    """Offsets and writers' last event numbers, counted and never stored; shared by every
    connection of the process."""

    def __init__(self, read_hold: float) -> None:
        self.read_hold = read_hold
        self.ack_delay = 0.0  # seconds every reply waits (a server whose only cost is latency)
        self.offsets: dict[str, int] = {}
        self.last_event: dict[tuple[str, uuid.UUID], int] = {}
        self.counts: Counter[str] = Counter()


class NullConnection(asyncio.Protocol):
    """One client connection: decode, answer in the same turn, never wait on anything."""

    def __init__(self, store: NullStore) -> None:
        self.store = store
        self.decoder = FrameDecoder(MAX_PAYLOAD_TO_SERVER)
        self.transport: asyncio.Transport | None = None
        self.greeted = False
        self.writers: dict[uuid.UUID, str] = {}  # writer id -> segment, set up here
        self.held: set[asyncio.TimerHandle] = set()
        self.delayed: deque[tuple[float, list[bytes]]] = deque()  # (due, replies), in order
        self.timer: asyncio.TimerHandle | None = None
        self.write_paused = False  # the transport's buffer is over its high-water mark
        self.read_paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.store.counts["connections"] += 1

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
        for handle in self.held:
            handle.cancel()
        self.held.clear()
        self.transport = None

    def pause_writing(self) -> None:
        self.write_paused = True
        self.flow()

    def resume_writing(self) -> None:
        self.write_paused = False
        self.flow()

    def flow(self) -> None:
        """Read the socket only while this connection's output is bounded: the transport
        under its high-water mark and fewer than ``MAX_DELAYED`` batches held."""
        pause = self.write_paused or len(self.delayed) >= MAX_DELAYED
        if pause != self.read_paused and self.transport is not None:
            self.read_paused = pause
            if pause:
                self.transport.pause_reading()
            else:
                self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        try:
            commands = self.decoder.feed(data)
        except RemoteProtocolError:
            self.refuse("undecodable")
            return
        out: list[bytes] = []
        for command in commands:
            if not self.answer(command, out):
                self.refuse(type(command).__name__)
            if self.transport is None:  # refused (here or by ``hold``)
                return
        if not out or self.transport is None:
            return
        if self.store.ack_delay <= 0:
            self.transport.writelines(out)
            return
        loop = asyncio.get_running_loop()
        self.delayed.append((loop.time() + self.store.ack_delay, out))
        if self.timer is None:
            self.timer = loop.call_at(self.delayed[0][0], self.release)
        self.flow()

    def release(self) -> None:
        """Send every delayed batch of replies that is due, in arrival order."""
        loop = asyncio.get_running_loop()
        self.timer = None
        now, counts = loop.time(), self.store.counts
        while self.delayed and self.delayed[0][0] <= now:
            due, replies = self.delayed.popleft()
            counts["held_batches"] += 1  # the hold really given (the loop's timers are coarse)
            counts["held_us"] += round((now - due + self.store.ack_delay) * 1e6)
            if self.transport is not None:
                self.transport.writelines(replies)
        if self.delayed:
            self.timer = loop.call_at(self.delayed[0][0], self.release)
        self.flow()

    def refuse(self, why: str) -> None:
        """Close without a reply (the real server's answer to a protocol violation)."""
        self.store.counts["refused"] += 1
        self.store.counts[f"refused:{why}"] += 1
        if self.transport is not None:
            self.transport.abort()
            self.transport = None  # nothing more is answered; connection_lost cleans up

    def answer(self, c: Command, out: list[bytes]) -> bool:
        """Append ``c``'s reply to ``out``; False when the connection must be closed."""
        counts = self.store.counts
        if not self.greeted:
            if not isinstance(c, Hello):
                return False
            self.greeted = True
            out.append(encode(Hello(WIRE_VERSION, OLDEST_COMPATIBLE_VERSION)))
            return True
        if isinstance(c, AppendBlockEnd):
            segment = self.writers.get(c.writer_id)
            if segment is None or c.size_of_whole_events != len(c.data) or c.num_events < 1:
                return False
            key = (segment, c.writer_id)
            previous = self.store.last_event[key]
            offset = self.store.offsets[segment]
            if c.last_event_number > previous:  # not a resend
                offset += len(c.data)
                self.store.offsets[segment] = offset
                self.store.last_event[key] = c.last_event_number
                counts["blocks"] += 1
                counts["events"] += c.num_events
                counts["bytes"] += len(c.data)
            else:
                counts["resent_blocks"] += 1
            wid = c.writer_id.bytes
            out.append(data_appended_frame(wid, c.last_event_number, previous, c.request_id, offset))  # fmt: skip
            return True
        if isinstance(c, ConditionalBlockEnd):
            segment = self.writers.get(c.writer_id)
            if segment is None:
                return False
            key = (segment, c.writer_id)
            if c.expected_offset != self.store.offsets[segment]:
                counts["conditional_failed"] += 1
                out.append(encode(ConditionalCheckFailed(c.writer_id, c.event_number, c.request_id)))  # fmt: skip
                return True
            offset = c.expected_offset + len(c.data)
            previous = self.store.last_event[key]
            self.store.offsets[segment] = offset
            self.store.last_event[key] = max(previous, c.event_number)
            counts["conditional_blocks"] += 1
            counts["bytes"] += len(c.data)
            wid = c.writer_id.bytes
            out.append(data_appended_frame(wid, c.event_number, previous, c.request_id, offset))
            return True
        if isinstance(c, KeepAlive):
            out.append(encode(c))
            return True
        if isinstance(c, Reply) or not hasattr(c, "request_id"):
            return False  # a reply sent to the server, a bare event, a second Hello, ...
        counts[type(c).__name__] += 1
        reply = self.reply(c)
        if reply is not None:
            out.append(encode(reply))
        return True

    def reply(self, c: Any) -> Command | None:
        """The reply to a request that is not an append (``c`` has a ``request_id``)."""
        offsets = self.store.offsets
        if isinstance(c, ECHOING):
            name = c.segment_name if isinstance(c, GetStreamSegmentInfo) else c.segment
            if wire_length(name) > 0xFFFF:  # no reply can carry it
                self.refuse("unencodable")
                return None
        if isinstance(c, SetupAppend):
            problem = name_problem(c.segment)
            if problem is not None:
                return ErrorMessage(c.request_id, c.segment, problem)
            offsets.setdefault(c.segment, 0)
            self.writers[c.writer_id] = c.segment
            last = self.store.last_event.setdefault((c.segment, c.writer_id), NEW_WRITER)
            return AppendSetup(c.request_id, c.segment, c.writer_id, last)
        if isinstance(c, GetStreamSegmentInfo):
            offset = offsets.get(c.segment_name, 0)
            return StreamSegmentInfo(c.request_id, c.segment_name, True, False, False, 0, offset)
        if isinstance(c, CreateSegment):
            offsets.setdefault(c.segment, 0)
            return SegmentCreated(c.request_id, c.segment)
        if isinstance(c, ReadSegment):
            self.hold(c)  # may refuse: more than MAX_HELD_READS at once
            return None
        return OperationUnsupported(c.request_id, type(c).__name__)

    def hold(self, c: ReadSegment) -> None:
        """Answer a read as at the tail with no data, after ``read_hold`` seconds."""
        if len(self.held) >= MAX_HELD_READS:
            self.refuse("too many reads")
            return
        loop = asyncio.get_running_loop()

        def fire() -> None:
            self.held.discard(handle)
            if self.transport is not None:
                empty = SegmentRead(c.segment, c.offset, True, False, b"", c.request_id)
                self.transport.write(encode(empty))

        handle = loop.call_later(self.store.read_hold, fire)
        self.held.add(handle)


C_SOURCE = Path(__file__).resolve().with_name("null_server.c")


def c_compiler() -> str | None:
    """The C compiler ``build_c_server`` uses (``$CC``, else ``cc``), or None."""
    return shutil.which(os.environ.get("CC", "cc"))


def build_c_server(directory: Path) -> Path:
    """Compile ``null_server.c`` with ``cc -O2`` into ``directory``; the executable's path.
    Raises RuntimeError with the compiler's message when there is no compiler or it fails."""
    cc = c_compiler()
    if cc is None:
        raise RuntimeError("no C compiler (cc) on PATH")
    out = directory / "null_server"
    argv = [cc, "-O2", "-std=c11", "-Wall", "-Wextra", "-o", str(out), str(C_SOURCE)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0 or proc.stderr.strip():  # a warning is a bug here too
        raise RuntimeError(f"cc failed on {C_SOURCE.name}: {proc.stderr.strip()[-2000:]}")
    return out


class NullServerProcess:
    """This script (or, with ``binary``, the C server ``build_c_server`` made) as a child
    process (for ``bench_streams.py`` and the tests): ``start`` waits for the ready line,
    ``stats`` asks for the counters, ``cpu`` reads its CPU seconds from /proc, ``stop``
    closes its stdin (it exits) and waits. ``impl`` says which: "python" or "c"."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        read_hold: float = 10.0,
        binary: Path | None = None,
    ) -> None:
        self.host, self.port = host, port
        self.impl = "python" if binary is None else "c"
        argv = [sys.executable, str(Path(__file__).resolve())] if binary is None else [str(binary)]
        argv += ["--host", host, "--port", str(port), "--read-hold", str(read_hold)]
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def start(self, timeout: float = 30.0) -> NullServerProcess:
        assert self.proc.stdout is not None
        ready = select.select([self.proc.stdout], [], [], timeout)[0]
        line = self.proc.stdout.readline() if ready else ""
        if not line.startswith("null server listening on "):
            self.proc.kill()
            _, err = self.proc.communicate(timeout=10)
            raise RuntimeError(f"null server did not start: {line.strip()} {err.strip()}")
        self.port = int(line.rsplit(":", 1)[1])
        return self

    def stats(self) -> dict[str, int]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("stats\n")
        self.proc.stdin.flush()
        counts: dict[str, int] = json.loads(self.proc.stdout.readline())
        return counts

    def delay(self, seconds: float) -> None:
        """Make every later reply wait ``seconds`` (0: answer at once)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"delay {seconds}\n")
        self.proc.stdin.flush()
        assert json.loads(self.proc.stdout.readline()) == {"ack_delay": seconds}

    def cpu(self) -> float:
        stat = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self, timeout: float = 10.0) -> int:
        if self.proc.poll() is None:
            try:
                self.proc.communicate(timeout=timeout)  # closes stdin: the server exits
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.communicate(timeout=timeout)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()
        return self.proc.wait()


async def serve(host: str, port: int, read_hold: float, max_seconds: float) -> None:
    """Listen, print the ready line, answer ``stats`` lines on stdin until it closes."""
    loop = asyncio.get_running_loop()
    store = NullStore(read_hold)
    server = await loop.create_server(lambda: NullConnection(store), host, port, backlog=256)
    bound = server.sockets[0].getsockname()
    print(f"null server listening on {bound[0]}:{bound[1]}", flush=True)
    stdin = asyncio.StreamReader()
    mode = os.fstat(sys.stdin.fileno()).st_mode
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or sys.stdin.isatty():
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    else:  # a file or /dev/null (uvloop aborts on those): its lines, then the end
        stdin.feed_data(sys.stdin.buffer.read())
        stdin.feed_eof()

    async def control() -> None:
        while line := await stdin.readline():
            word, _, arg = line.decode().strip().partition(" ")
            if word == "stats":
                print(json.dumps(dict(store.counts)), flush=True)
            elif word == "delay":  # "delay SECONDS": every later reply waits that long
                try:
                    seconds = float(arg)
                except ValueError:
                    seconds = math.nan
                if not -1e9 < seconds < 1e9:
                    print(f"null_server: not a number of seconds: {arg}", file=sys.stderr)
                    continue
                store.ack_delay = max(0.0, seconds)
                print(json.dumps({"ack_delay": store.ack_delay}), flush=True)

    try:
        await asyncio.wait_for(control(), max_seconds)
    except TimeoutError:
        pass
    finally:
        server.close()
        print(json.dumps(dict(store.counts)), flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1", help="a loopback address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=0, help="0: an ephemeral port")
    p.add_argument("--read-hold", type=float, default=10.0, help="seconds a read is held")
    p.add_argument("--max-seconds", type=float, default=3600.0, help="stop after this long")
    a = p.parse_args()
    if not a.host.startswith("127."):
        print(f"null_server: refusing to listen on {a.host}: loopback only", file=sys.stderr)
        return 2
    run: Any = asyncio.run
    try:
        import uvloop  # the real server's loop, when installed

        run = uvloop.run
    except ImportError:
        pass
    try:
        run(serve(a.host, a.port, a.read_hold, a.max_seconds))
    except OSError as e:
        print(f"null_server: cannot listen on {a.host}:{a.port}: {e.strerror}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
