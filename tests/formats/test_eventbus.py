"""Request/reply over segments (``client.events``) against a real server, with handler
processes sharing the work."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import segmentstore_client as sc
from segmentstore_client.eventbus import EventBus
from segmentstore_client.formats import events
from segmentstore_client.formats.events import Event

if TYPE_CHECKING:
    from conftest import ServerProcess  # tests/conftest.py

HANDLER = Path(__file__).with_name("eventbus_handler.py")


@pytest.fixture
def scope() -> str:
    return f"formats/bus{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def handler_bus(fclient: sc.Client, scope: str) -> AsyncIterator[EventBus]:
    bus = fclient.events(scope)
    bus.on("echo", lambda ev: ev.data)

    async def price(ev: Event) -> dict[str, object]:
        await asyncio.sleep(0)
        return {"sku": ev.data.decode(), "price": 9.99}

    bus.on("price", price, namespace="catalog")
    bus.on("silent", lambda ev: None)
    bus.on("reply-event", lambda ev: Event("custom", b"x", id=77))
    seg = bus.request_segment(0)
    await fclient.create_segment(seg, exist_ok=True)
    task = asyncio.create_task(bus.serve(0, offset=(await fclient.segment_info(seg)).length))
    yield bus
    await bus.close()
    await asyncio.gather(task, return_exceptions=True)


async def test_reply_matched_by_ref_id(
    fclient: sc.Client, scope: str, handler_bus: EventBus
) -> None:
    async with fclient.events(scope) as bus:
        reply = await bus.emit("echo", b"hello", timeout=10)
        assert isinstance(reply, Event)
        assert reply.data == b"hello" and reply.name == "echo" and reply.namespace is None
        assert reply.ref_id is not None and reply.ref_id >> 32 == bus.prefix
        priced = await bus.emit("price", b"sku-1", namespace="catalog", timeout=10)
        assert isinstance(priced, Event) and priced.namespace == "catalog"
        assert events.loads(priced.data) == {"sku": "sku-1", "price": 9.99}
        custom = await bus.emit("reply-event", timeout=10)
        assert isinstance(custom, Event) and (custom.name, custom.id) == ("custom", 77)
        ev_id = await bus.emit("echo", b"no wait", wait_reply=False)
        assert isinstance(ev_id, int) and ev_id >> 32 == bus.prefix


async def test_unknown_names_and_namespaces_are_ignored(
    fclient: sc.Client, scope: str, handler_bus: EventBus
) -> None:
    async with fclient.events(scope) as bus:
        for name, ns in [("nope", None), ("price", None), ("echo", "catalog"), ("price", "x")]:
            with pytest.raises(sc.Timeout):
                await bus.emit(name, b"", namespace=ns, timeout=0.5)
        with pytest.raises(sc.Timeout):
            await bus.emit("silent", b"", timeout=0.5)  # the handler returned None
        assert handler_bus.ignored == 4
        # The bus still answers afterwards.
        reply = await bus.emit("echo", b"still here", timeout=10)
        assert isinstance(reply, Event) and reply.data == b"still here"


async def test_event_with_unmatched_ref_id_is_handled_as_regular(
    fclient: sc.Client, scope: str, handler_bus: EventBus
) -> None:
    before = handler_bus.handled
    async with fclient.writer(handler_bus.request_segment(0)) as w:
        await w.write(events.encode_event("echo", b"", id=1, ref_id=12345))
        await w.write(b"not an event")  # skipped with a warning, not fatal
    async with fclient.events(scope) as bus:
        assert isinstance(await bus.emit("echo", b"after", timeout=10), Event)
    assert handler_bus.handled == before + 2


async def test_concurrent_emitters_each_get_their_reply(
    fclient: sc.Client, scope: str, handler_bus: EventBus
) -> None:
    async with fclient.events(scope) as bus:

        async def emitter(k: int) -> None:
            for i in range(50):
                payload = b"%d-%d" % (k, i)
                reply = await bus.emit("echo", payload, timeout=20)
                assert isinstance(reply, Event) and reply.data == payload

        await asyncio.gather(*(emitter(k) for k in range(4)))


async def test_close_fails_waiting_emits(fclient: sc.Client, scope: str) -> None:
    bus = fclient.events(scope)
    with pytest.raises(sc.NoSuchSegment):  # no handler made the request segment
        await bus.emit("nobody", b"", timeout=30)
    await fclient.create_segment(bus.request_segment(0))
    waiting = asyncio.create_task(bus.emit("nobody", b"", timeout=30))
    for _ in range(500):
        if bus._pending:
            break
        await asyncio.sleep(0.01)
    await bus.close()
    with pytest.raises(sc.ClientClosed):
        await waiting
    with pytest.raises(sc.ClientClosed):
        await bus.emit("x")


async def test_two_handler_processes_share_the_work(
    module_server: ServerProcess, fclient: sc.Client, scope: str
) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, str(HANDLER), module_server.endpoint, scope, str(p)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for p in range(2)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
        async with fclient.events(scope, partitions=2) as bus:
            pids = set()

            async def emitter(k: int) -> None:
                for i in range(50):
                    payload = b"%d:%d" % (k, i)
                    reply = await bus.emit("echo", payload, timeout=20)
                    assert isinstance(reply, Event) and reply.data == payload
                    who = await bus.emit("whoami", namespace="proc", timeout=20)
                    assert isinstance(who, Event)
                    pids.add(int(who.data))

            await asyncio.gather(*(emitter(k) for k in range(4)))
        assert pids == {p.pid for p in procs}
    finally:
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.close()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
