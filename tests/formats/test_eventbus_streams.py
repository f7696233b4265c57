"""Request/reply over streams (``client.events(scope, over="streams")``) against a real
server with its controller: handler processes in one reader group share the request
stream, a handler killed with SIGKILL and restarted resumes from the group's stored
offsets, every request is answered at least once and each emit sees one reply."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import segmentstore_client as sc
from controller.conftest import controller_uri  # tests/controller/conftest.py
from segmentstore_client.formats import events
from segmentstore_client.formats.events import Event

from segmentstore.server.launcher import ServerProcess

HANDLER = Path(__file__).with_name("eventbus_handler.py")


@pytest.fixture(scope="module")
def ctl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    s = ServerProcess(tmp_path_factory.mktemp("bus-streams"), ["--controller-port", "0"])
    s.start()
    yield s
    s.kill()


@pytest.fixture
async def sclient(ctl_server: ServerProcess) -> AsyncIterator[sc.Client]:
    async with sc.connect(ctl_server.endpoint, controller=controller_uri(ctl_server)) as c:
        yield c


@pytest.fixture
def scope() -> str:
    return f"bus{uuid.uuid4().hex[:10]}"


class Handler:
    """A handler process serving the request stream as one reader of the group."""

    def __init__(self, server: ServerProcess, scope: str, reader_id: str, *extra: str) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(HANDLER),
                server.endpoint,
                scope,
                reader_id,
                "--controller",
                controller_uri(server),
                *extra,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        assert line == "ready", line
        self.lines: list[str] = []

    async def read_lines(self) -> None:
        """Collect the process's output lines until it ends (run as a task)."""
        assert self.proc.stdout is not None
        while True:
            line = await asyncio.to_thread(self.proc.stdout.readline)
            if not line:
                return
            self.lines.append(line.strip())

    def got(self) -> list[int]:
        return [int(ln.split()[1]) for ln in self.lines if ln.startswith("got ")]

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


async def test_reply_unknown_names_and_late_replies(sclient: sc.Client, scope: str) -> None:
    handlers = sclient.events(scope, over="streams", partitions=2, reader_timeout=5)
    handlers.on("echo", lambda ev: ev.data)
    handlers.on("price", lambda ev: {"sku": ev.data.decode()}, namespace="catalog")
    serving = asyncio.create_task(handlers.serve(reader_id="in-test"))
    try:
        async with sclient.events(scope, over="streams") as bus:
            reply = await bus.emit("echo", b"hello", timeout=20)
            assert isinstance(reply, Event) and reply.data == b"hello"
            assert reply.ref_id is not None and reply.ref_id >> 32 == bus.prefix
            priced = await bus.emit("price", b"sku-1", namespace="catalog", timeout=20)
            assert isinstance(priced, Event) and events.loads(priced.data) == {"sku": "sku-1"}
            ordered = await bus.emit("echo", b"keyed", routing_key="catalog/price", timeout=20)
            assert isinstance(ordered, Event) and ordered.data == b"keyed"
            for name, ns in [("nope", None), ("price", None), ("echo", "catalog"), ("price", "x")]:
                with pytest.raises(sc.Timeout):
                    await bus.emit(name, b"", namespace=ns, timeout=0.5)
            assert handlers.ignored == 4
            # A second reply to an answered request is dropped, not handled or returned.
            assert isinstance(await bus.emit("echo", b"again", timeout=20), Event)
            own = bus.new_id() - 1  # the id of the request just answered
            dup = events.encode_event("echo", b"dup", id=1, ref_id=own)
            async with sclient.writer(bus.reply_segment(bus.prefix)) as w:
                await w.write(dup)
            for _ in range(500):
                if bus.late_replies:
                    break
                await asyncio.sleep(0.01)
            assert bus.late_replies == 1 and bus.ignored == 0
            with pytest.raises(ValueError, match="partition"):
                await bus.emit("echo", partition=0)
            with pytest.raises(ValueError, match="read_size"):
                await bus.emit("echo", b"x" * bus.read_size)
    finally:
        await handlers.close()
        await asyncio.gather(serving, return_exceptions=True)
    state = await handlers.reader_group().state()
    assert state["assigned"] == {}  # closing left the group: its segments are free again


async def test_two_handler_processes_share_the_stream(
    ctl_server: ServerProcess, sclient: sc.Client, scope: str
) -> None:
    async with sclient.events(scope, over="streams", partitions=4) as bus:
        await bus.start()  # the request stream exists before the handlers join
        procs = [Handler(ctl_server, scope, f"h{i}") for i in range(2)]
        try:
            pids: set[int] = set()

            async def emitter(k: int) -> None:
                for i in range(40):
                    payload = b"%d:%d" % (k, i)
                    reply = await bus.emit("echo", payload, timeout=30)
                    assert isinstance(reply, Event) and reply.data == payload
                    who = await bus.emit("whoami", namespace="proc", timeout=30)
                    assert isinstance(who, Event)
                    pids.add(int(who.data))

            await asyncio.gather(*(emitter(k) for k in range(4)))
            assert pids == {h.proc.pid for h in procs}
        finally:
            for h in procs:
                h.stop()


async def test_handler_killed_and_restarted_answers_every_request(
    ctl_server: ServerProcess, sclient: sc.Client, scope: str
) -> None:
    n = 300
    small = ("--read-size", "2048", "--delay", "0.005", "--trace")
    async with sclient.events(scope, over="streams", partitions=1) as bus:
        await bus.start()
        first = Handler(ctl_server, scope, "worker", *small)
        reading = asyncio.create_task(first.read_lines())
        emits = [asyncio.create_task(bus.emit("echo", b"req-%d" % i, timeout=45)) for i in range(n)]
        deadline = time.monotonic() + 60
        while len(first.got()) < 100 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert len(first.got()) >= 100, first.lines[-5:]
        first.proc.send_signal(signal.SIGKILL)  # mid-work: no goodbye to the group
        first.proc.wait()
        await reading
        second = Handler(ctl_server, scope, "worker", *small)  # same reader id: resumes
        reading = asyncio.create_task(second.read_lines())
        try:
            replies = await asyncio.gather(*emits)
        finally:
            second.stop()
            await reading
        for i, reply in enumerate(replies):
            assert isinstance(reply, Event) and reply.data == b"req-%d" % i
        before, after = first.got(), second.got()
        assert len(set(before)) == len(before) and len(set(after)) == len(after)
        assert set(before) | set(after) == {r.ref_id for r in replies if isinstance(r, Event)}
        again = set(before) & set(after)
        # Resumed from the stored offsets, not the head: most of the first's work stays done.
        assert len(again) < len(before), (len(again), len(before))
        # Requests handled twice answer twice; the emitter returned one reply each and
        # dropped the rest (a reply of the killed process may not have been stored).
        deadline = time.monotonic() + 10
        while bus.late_replies < len(again) - 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert len(again) - 1 <= bus.late_replies <= len(again)


async def test_request_is_passed_only_once_its_reply_is_stored(
    sclient: sc.Client, scope: str
) -> None:
    handlers = sclient.events(scope, over="streams", reader_timeout=5)
    handlers.on("echo", lambda ev: ev.data)
    async with sclient.events(scope, over="streams") as bus:
        await bus.start()
        await bus.emit("echo", b"unanswerable", wait_reply=False)
        await sclient.seal(bus.reply_segment(bus.prefix))  # its reply cannot be stored
        serving = asyncio.create_task(handlers.serve(reader_id="r1"))
        with pytest.raises(sc.SegmentSealed):
            await asyncio.wait_for(serving, 30)
        await handlers.close()
        state = await handlers.reader_group().state()
        # The handler left the group with the request still to handle, at offset 0.
        assert state["assigned"] == {} and list(state["unassigned"].values()) == [0]
        assert handlers.handled == 1
