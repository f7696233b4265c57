"""The SDK's failure paths and lifecycle (issue 15): every case has a documented bound and
must finish within it plus one second.

Each test names the defect it guards. Servers are real (``segmentstore serve`` on
127.0.0.1, ephemeral port); the "nothing listens" cases use a port we bound and closed,
the "silent peer" case a socket that accepts and never answers.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest
import segmentstore_client as sc
from segmentstore_client import sync

from .timing import SLACK, Bound

if TYPE_CHECKING:
    from conftest import ServerProcess

BIG = 8 * 2**20 + 1


def free_port() -> int:
    """A port on 127.0.0.1 where nothing listens (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- 1. the sync facade after close -------------------------------------------------------


def closed_calls(c: sync.SyncClient) -> dict[str, Callable[[], object]]:
    return {
        "segment_info": lambda: c.segment_info("x"),
        "create_segment": lambda: c.create_segment("x"),
        "seal": lambda: c.seal("x"),
        "truncate": lambda: c.truncate("x", 0),
        "delete": lambda: c.delete("x"),
        "merge": lambda: c.merge("x", "y"),
        "get_attribute": lambda: c.get_attribute("x", "a"),
        "event_count": lambda: c.event_count("x"),
        "create_table": lambda: c.create_table("t"),
        "table_info": lambda: c.table_info("t"),
        "read_bytes": lambda: c.read_bytes("x", 0, 8),
        "writer": lambda: c.writer("x"),
        "reader": lambda: list(c.reader("x")),
        "table.get": lambda: c.table("t").get("k"),
    }


def test_sync_calls_after_close_raise_client_closed(module_server: ServerProcess) -> None:
    c = sync.connect(module_server.endpoint)
    c.close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Bound(0):
            for name, call in closed_calls(c).items():
                with pytest.raises(sc.ClientClosed):
                    call()
                    pytest.fail(f"{name} did not raise")
        gc.collect()
    assert [str(w.message) for w in caught] == []


def test_sync_objects_made_before_close_raise_client_closed(
    module_server: ServerProcess, segment: str
) -> None:
    c = sync.connect(module_server.endpoint)
    c.create_segment(segment)
    w = c.writer(segment)
    w.write(b"a").wait(5)
    r = c.reader(segment)
    t = c.table(f"{segment}-t")
    c.close()
    with Bound(0):
        with pytest.raises(sc.ClientClosed):
            w.write(b"b")
        with pytest.raises(sc.ClientClosed):
            w.flush()
        with pytest.raises(sc.ClientClosed):
            next(r)
        with pytest.raises(sc.ClientClosed):
            t.get("k")
        w.close()  # the client closed it already: nothing to report
        r.close()


# -- 2. oversized events ------------------------------------------------------------------


def test_sync_oversized_event_fails_at_the_call(module_server: ServerProcess, segment: str) -> None:
    with sync.connect(module_server.endpoint) as c:
        c.create_segment(segment)
        with c.writer(segment) as w:
            w.write(b"before")
            with pytest.raises(sc.EventTooLarge, match="exceeds"):
                w.write(b"x" * BIG)
            with pytest.raises(sc.EventTooLarge):
                w.write_many([b"ok", b"y" * BIG])
            w.write(b"after").wait(5)
            w.flush()
        assert [e.data for e in c.reader(segment)] == [b"before", b"after"]


async def test_async_oversized_event_fails_at_the_call(
    module_server: ServerProcess, segment: str
) -> None:
    async with sc.connect(module_server.endpoint) as c:
        await c.create_segment(segment)
        async with c.writer(segment) as w:
            await w.write(b"before")
            with pytest.raises(sc.EventTooLarge):
                await w.write(b"x" * BIG)
            await (await w.write(b"after"))
        assert [e.data async for e in c.reader(segment)] == [b"before", b"after"]


# -- 3. names -----------------------------------------------------------------------------

BAD_NAMES = {
    "empty": ("", "empty"),
    "too long": ("n" * 70_000, "longer than"),
    "control": ("a\nb", r"U\+000A"),
    "nul": ("a\x00b", r"U\+0000"),
}


@pytest.mark.parametrize("case", sorted(BAD_NAMES))
async def test_bad_names_are_refused_before_sending(
    module_server: ServerProcess, case: str
) -> None:
    name, why = BAD_NAMES[case]
    async with sc.connect(module_server.endpoint) as c:
        calls: list[Callable[[], Any]] = [
            lambda: c.create_segment(name),
            lambda: c.segment_info(name),
            lambda: c.delete(name),
            lambda: c.create_table(name),
            lambda: c.merge("ok", name),
            lambda: c.read_bytes(name, 0, 8),
        ]
        for call in calls:
            with pytest.raises(sc.InvalidSegmentName, match=why) as info:
                await call()
            assert repr(name[:20])[1:-1] in str(info.value)
        for make in (c.writer, c.reader, c.table):
            with pytest.raises(sc.InvalidSegmentName, match=why):
                make(name)
        assert await c.create_segment(f"ok-{case}", exist_ok=True) in (True, False)


def test_bad_name_sync(module_server: ServerProcess) -> None:
    with sync.connect(module_server.endpoint) as c:
        with pytest.raises(sc.InvalidSegmentName, match="empty"):
            c.create_segment("")
        with pytest.raises(ValueError):  # it is a ValueError too
            c.writer("")


# -- 4. refused and silent first connects ---------------------------------------------------


def test_refused_first_connect_fails_fast_sync() -> None:
    port = free_port()
    with Bound(0), pytest.raises(sc.ConnectFailed) as info:
        sync.connect(f"tcp://127.0.0.1:{port}")  # reconnect_timeout is 60 s by default
    assert info.value.refused
    assert str(port) in str(info.value)


async def test_refused_first_connect_fails_fast_async() -> None:
    port = free_port()
    with Bound(0), pytest.raises(sc.ConnectFailed):
        await sc.connect(f"tcp://127.0.0.1:{port}")
    c = sc.connect(f"tcp://127.0.0.1:{port}")  # not opened: the first use connects
    with Bound(0), pytest.raises(sc.ConnectFailed):
        await c.segment_info("x")
    with Bound(0), pytest.raises(sc.ConnectFailed):
        await c.writer("x").start()
    await c.close()


async def test_silent_first_connect_is_bounded_by_connect_timeout() -> None:
    with socket.socket() as lsock:
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(8)  # accepts (in the kernel) and never answers Hello
        port = lsock.getsockname()[1]
        with Bound(0.5), pytest.raises(sc.ConnectFailed, match="Hello"):
            await sc.connect(f"tcp://127.0.0.1:{port}", connect_timeout=0.5)


# -- 5. a reader whose server died --------------------------------------------------------


async def test_reads_give_up_within_reconnect_timeout(server: ServerProcess) -> None:
    async with sc.connect(server.endpoint, reconnect_timeout=2) as c:
        await c.create_segment("dies/0")
        async with c.writer("dies/0") as w:
            await w.write(b"x")
        reader = c.reader("dies/0", follow=True)
        assert (await reader.__anext__()).data == b"x"
        parked = asyncio.create_task(reader.__anext__())  # a read in flight at the tail
        await asyncio.sleep(0.3)
        server.kill()
        with Bound(2), pytest.raises(sc.ConnectionLost):
            await parked
        with Bound(2), pytest.raises(sc.ConnectionLost):
            await c.read_bytes("dies/0", 0, 8)
        with Bound(2), pytest.raises(sc.ConnectionLost):
            await c.segment_info("dies/0")
        with Bound(2), pytest.raises(sc.ConnectionLost):
            [e async for e in c.reader("dies/0")]


# -- 6. close wakes every reader, writer and pending call -------------------------------


async def test_reader_close_ends_a_follow_reader_at_the_tail(
    module_server: ServerProcess, segment: str
) -> None:
    async with sc.connect(module_server.endpoint) as c:
        await c.create_segment(segment)
        reader = c.reader(segment, follow=True)
        got: list[bytes] = []

        async def consume() -> None:
            async for e in reader:
                got.append(e.data)

        task = asyncio.create_task(consume())
        await asyncio.sleep(0.3)  # parked at the tail (the server holds it 10 s)
        with Bound(0):
            await reader.close()
            await asyncio.wait_for(task, 1.0 + SLACK)
        assert got == []


async def test_client_close_ends_follow_readers_and_pending_calls(server: ServerProcess) -> None:
    c = await sc.connect(server.endpoint, reconnect_timeout=30)
    await c.create_segment("tail/0")
    reader = c.reader("tail/0", follow=True)
    follow = asyncio.create_task(reader.read_batch())
    await asyncio.sleep(0.3)
    with Bound(0):
        await c.close()
        assert await asyncio.wait_for(follow, 1.0 + SLACK) == []

    c = await sc.connect(server.endpoint, reconnect_timeout=30)
    server.kill()
    pending = asyncio.create_task(c.segment_info("tail/0"))  # reconnecting for 30 s
    await asyncio.sleep(0.5)
    with Bound(0):
        await c.close()
        with pytest.raises(sc.ClientClosed):
            await asyncio.wait_for(pending, 1.0 + SLACK)


async def test_client_close_does_not_wait_out_a_reconnecting_writer(
    server: ServerProcess,
) -> None:
    c = await sc.connect(server.endpoint, reconnect_timeout=30)
    await c.create_segment("w/0")
    w = await c.writer("w/0").start()
    await (await w.write(b"durable"))
    server.kill()
    await asyncio.sleep(0.2)  # the writer is reconnecting now (for up to 30 s)
    ack = await w.write(b"never acknowledged")
    with Bound(0):
        await c.close()
    with pytest.raises(sc.ClientClosed):
        await ack
    with pytest.raises(sc.ClientClosed):
        await w.write(b"after")


def test_sync_client_close_does_not_wait_out_a_reconnecting_writer(
    server: ServerProcess,
) -> None:
    c = sync.connect(server.endpoint, reconnect_timeout=30)
    c.create_segment("w/0")
    w = c.writer("w/0")
    w.write(b"durable").wait(5)
    server.kill()
    time.sleep(0.2)
    ack = w.write(b"never acknowledged")
    with Bound(0):
        c.close()
    with pytest.raises(sc.ClientClosed):
        ack.wait(1)


def test_sync_client_close_ends_a_thread_iterating_a_follow_reader(
    module_server: ServerProcess, segment: str
) -> None:
    c = sync.connect(module_server.endpoint)
    c.create_segment(segment)
    with c.writer(segment) as w:
        w.write(b"one")
    outcome: list[object] = []

    def consume() -> None:
        try:
            for e in c.reader(segment, follow=True):
                outcome.append(e.data)
            outcome.append("end")
        except sc.ClientClosed as e:
            outcome.append(e)

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    time.sleep(0.5)
    with Bound(0):
        c.close()
        t.join(1.0 + SLACK)
    assert not t.is_alive()
    assert outcome[0] == b"one"
    assert outcome[1] == "end" or isinstance(outcome[1], sc.ClientClosed)


# -- 7. no stray tracebacks ---------------------------------------------------------------

LEAVE_LOOPS = """
import asyncio, sys
import segmentstore_client as sc
from segmentstore_client import sync

ep, seg = sys.argv[1], sys.argv[2]

async def main():
    async with sc.connect(ep) as c:
        await c.create_segment(seg, exist_ok=True)
        async with c.writer(seg) as w:
            await w.write_many([b"e%d" % i for i in range(2000)])
        async for e in c.reader(seg, read_size=64):
            break
        async for e in c.reader(seg, follow=True):
            break
    c = await sc.connect(ep)
    async for e in c.reader(seg, read_size=64):
        break
    await c.close()

asyncio.run(main())
with sync.connect(ep) as c:
    for e in c.reader(seg, follow=True):
        break
    for e in c.reader(seg, read_size=64):
        break
c = sync.connect(ep)
r = c.reader(seg, follow=True)
next(r)
c.close()
print("done")
"""


def test_leaving_reader_loops_prints_nothing(module_server: ServerProcess, segment: str) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-W",
            "error::RuntimeWarning",
            "-c",
            LEAVE_LOOPS,
            module_server.endpoint,
            segment,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.stdout.strip() == "done", proc.stderr
    assert proc.stderr == ""


def test_unconfigured_logging_prints_nothing(server: ServerProcess) -> None:
    """A writer failing logs a WARNING: the NullHandler keeps it off stderr."""
    script = textwrap.dedent(
        """
        import sys, segmentstore_client as sc
        from segmentstore_client import sync
        c = sync.connect(sys.argv[1], reconnect_timeout=0.5)
        c.create_segment("lg/0", exist_ok=True)
        w = c.writer("lg/0")
        w.write(b"x").wait(5)
        c.seal("lg/0")
        try:
            w.write(b"y").wait(5)
        except sc.SegmentSealed:
            print("sealed")
        try:
            w.close()
        except sc.SegmentStoreError:
            pass
        c.close()
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, server.endpoint],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.stdout.strip() == "sealed", proc.stderr
    assert proc.stderr == ""


@pytest.fixture
def no_thread_leak() -> Iterator[None]:
    before = {t.ident for t in threading.enumerate()}
    yield
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        extra = [
            t
            for t in threading.enumerate()
            if t.ident not in before and t.name == "segmentstore-client-loop"
        ]
        if not extra:
            return
        time.sleep(0.05)
    raise AssertionError(f"loop threads left running: {extra}")


def test_sync_close_stops_its_loop_thread(
    module_server: ServerProcess, no_thread_leak: None
) -> None:
    for _ in range(3):
        c = sync.connect(module_server.endpoint)
        c.close()
    port = free_port()
    with pytest.raises(sc.ConnectFailed):
        sync.connect(f"tcp://127.0.0.1:{port}")
