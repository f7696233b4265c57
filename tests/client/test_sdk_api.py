"""What users of nats-py, redis-py and aiokafka expect of the SDK (issue 15): per-call
timeouts, poll/next with a timeout, ping and a connection state, errors that name what
they are about, complete type hints, equal signatures in both facades, README examples
that run without a warning."""

from __future__ import annotations

import asyncio
import inspect
import os
import re
import signal
import subprocess
import sys
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import segmentstore_client as sc
from segmentstore_client import sync
from segmentstore_client.streams.reader_group import GroupReader, ReaderGroup
from segmentstore_client.streams.stream_writer import StreamWriter
from segmentstore_client.streams.sync_groups import (
    SyncGroupReader,
    SyncReaderGroup,
    SyncTransaction,
)
from segmentstore_client.streams.sync_streams import SyncStreamWriter
from segmentstore_client.streams.transaction import Transaction

from .timing import Bound

if TYPE_CHECKING:
    from conftest import ServerProcess

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.fixture
def frozen(server: ServerProcess) -> Iterator[Callable[[], None]]:
    """``freeze()`` stops the server process (SIGSTOP): connections stay open, nothing
    answers. Thawed at teardown."""
    assert server.proc is not None
    pid = server.proc.pid

    def freeze() -> None:
        os.kill(pid, signal.SIGSTOP)

    yield freeze
    os.kill(pid, signal.SIGCONT)


# -- per-call timeouts ------------------------------------------------------------------


async def test_per_call_timeouts_async(server: ServerProcess, frozen: Callable[[], None]) -> None:
    async with sc.connect(server.endpoint) as c:  # request_timeout 30 s by default
        await c.create_segment("t/0")
        table = c.table("t/_tables/t")
        await table.create()
        w = c.writer("t/0")
        await w.start()
        assert c.state == "connected"
        frozen()
        calls: list[Callable[[], Any]] = [
            lambda: c.segment_info("t/0", timeout=0.3),
            lambda: c.create_segment("t/1", exist_ok=True, timeout=0.3),
            lambda: c.read_bytes("t/0", 0, 8, timeout=0.3),
            lambda: c.ping(timeout=0.3),
            lambda: table.get("k", timeout=0.3),
            lambda: table.put("k", "v", timeout=0.3),
        ]
        for call in calls:
            with Bound(0.3), pytest.raises(sc.Timeout, match=r"0\.3"):
                await call()
        await w.write(b"x")
        with Bound(0.3), pytest.raises(sc.Timeout):
            await w.flush(timeout=0.3)
        w.abort()


def test_per_call_timeouts_sync(server: ServerProcess, frozen: Callable[[], None]) -> None:
    with sync.connect(server.endpoint) as c:
        c.create_segment("t/0")
        frozen()
        with Bound(0.3), pytest.raises(sc.Timeout):
            c.segment_info("t/0", timeout=0.3)
        with Bound(0.3), pytest.raises(sc.Timeout):
            c.ping(timeout=0.3)
        w = c.writer("t/0")
        w.write(b"x")
        with Bound(0.3), pytest.raises(sc.Timeout):
            w.flush(timeout=0.3)
        w.abort()
        os.kill(server.proc.pid, signal.SIGCONT)  # type: ignore[union-attr]


# -- poll / next ------------------------------------------------------------------------


async def test_poll_and_next_with_timeout_async(module_server: ServerProcess, segment: str) -> None:
    async with sc.connect(module_server.endpoint) as c:
        await c.create_segment(segment)
        reader = c.reader(segment, follow=True)
        with Bound(0.3):
            assert await reader.poll(0.3) == []
        with Bound(0.3), pytest.raises(sc.Timeout):
            await reader.next(0.3)
        async with c.writer(segment) as w:
            await w.write_many([b"a", b"b"])
        with Bound(5):  # the read parked by poll() answers as soon as data arrives
            got = await reader.poll(5)
        assert [e.data for e in got] in ([b"a", b"b"], [b"a"])
        await c.seal(segment)
        rest = [e.data for e in got]
        while (event := await reader.next(5)) is not None:
            rest.append(event.data)
        assert rest == [b"a", b"b"]
        assert reader.ended
        plain = c.reader(segment)
        assert (await plain.next(1)) is not None
        assert (await plain.next(1)) is not None
        assert (await plain.next(1)) is None


def test_poll_and_next_with_timeout_sync(module_server: ServerProcess, segment: str) -> None:
    with sync.connect(module_server.endpoint) as c:
        c.create_segment(segment)
        reader = c.reader(segment, follow=True)
        with Bound(0.3):
            assert reader.poll(0.3) == []
        with Bound(0.3), pytest.raises(sc.Timeout):
            reader.next(0.3)
        with c.writer(segment) as w:
            w.write(b"a")
        event = reader.next(5)
        assert event is not None and event.data == b"a"
        assert reader.position.offset == event.next_offset
        c.seal(segment)
        assert reader.next(5) is None
        assert reader.ended


# -- ping and state ---------------------------------------------------------------------


async def test_ping_and_state(module_server: ServerProcess) -> None:
    c = sc.connect(module_server.endpoint)
    assert c.state == "disconnected"
    rtt = await c.ping(timeout=5)  # connects first
    assert 0 < rtt < 5
    assert c.state == "connected"
    await c.close()
    assert c.state == "closed"
    with pytest.raises(sc.ClientClosed):
        await c.ping()
    with sync.connect(module_server.endpoint) as s:
        assert s.state == "connected"
        assert 0 < s.ping() < 5
    assert s.state == "closed"


# -- listing ------------------------------------------------------------------------------


async def test_list_segments_by_prefix(module_server: ServerProcess, segment: str) -> None:
    base = segment.rsplit("/", 1)[0] + "/ls/"
    names = [f"{base}{i:04d}" for i in range(2500)] + [f"{base}\u00e9t\u00e9"]
    async with sc.connect(module_server.endpoint) as c:
        await asyncio.gather(*(c.create_segment(n) for n in names))
        await c.create_table(f"{base}_tables/t")
        await c.create_segment(base.rstrip("/") + "-not-under-it")
        got = await c.list_segments(base)  # three pages of 1000
        assert got == sorted([*names, f"{base}_tables/t"], key=lambda n: n.encode())
        assert await c.list_segments(base + "00") == names[:100]
        assert await c.list_segments(base + "nothing") == []
        await c.delete(names[0])
        assert names[0] not in await c.list_segments(base, timeout=10)
        everything = await c.list_segments()
        assert set(got) - {names[0]} <= set(everything)
    with sync.connect(module_server.endpoint) as s:
        assert s.list_segments(base + "24") == names[2400:2500]


# -- errors name what they are about -----------------------------------------------------


async def test_errors_name_their_subject(module_server: ServerProcess, segment: str) -> None:
    async with sc.connect(module_server.endpoint) as c:
        table = c.table(f"{segment}-t")
        with pytest.raises(sc.NoSuchSegment):  # a table must be created before put
            await table.put("k", "v")
        await table.create()
        v = await table.put("color", "blue")
        with pytest.raises(sc.TableKeyBadVersion, match="b'color' \\(version") as bad:
            await table.put("color", "red", version=v + 1000)
        assert bad.value.keys == (b"color",)
        with pytest.raises(sc.TableConditionFailed, match="b'color' \\(must not exist\\)"):
            await table.put("color", "red", must_not_exist=True)
        with pytest.raises(sc.TableKeyDoesNotExist, match="b'gone'"):
            await table.remove("gone", version=1)

        target, source = f"{segment}-target", f"{segment}-source"
        await c.create_segment(target)
        await c.create_segment(source)
        await c.seal(target)
        with pytest.raises(sc.SegmentSealed, match="target") as sealed:
            await c.merge(target, source)
        assert sealed.value.segment == target
        assert repr(target) in str(sealed.value)

        await c.create_segment(segment)
        async with c.writer(segment) as w:
            await w.write(b"abc")
        with pytest.raises(sc.SegmentTruncated, match="past its end") as past:
            [e async for e in c.reader(segment, offset=1000)]
        assert past.value.offset == 1000
        assert [e.data async for e in c.reader(segment, offset=11)] == []  # at the end: fine


# -- signatures and type hints -----------------------------------------------------------


def params(fn: Callable[..., object]) -> list[tuple[str, object, object]]:
    return [
        (p.name, p.kind, p.default)
        for p in inspect.signature(fn).parameters.values()
        if p.name != "self"
    ]


def test_sync_connect_has_the_async_signature() -> None:
    assert params(sync.connect) == params(sc.connect)
    hints = typing.get_type_hints(sync.connect)
    async_hints = typing.get_type_hints(sc.connect)
    assert {k: v for k, v in hints.items() if k != "return"} == {
        k: v for k, v in async_hints.items() if k != "return"
    }
    assert "reconnect_timeout" in (sync.connect.__doc__ or "") + str(
        inspect.signature(sync.connect)
    )


PAIRS: list[tuple[type, type, set[str]]] = [
    # (async class, sync class, async methods with no blocking twin)
    # events(): request/reply handlers are coroutines; the bus is async-only.
    (sc.Client, sync.SyncClient, {"open", "events"}),
    (sc.Table, sync.SyncTable, {"keys_page", "items_page"}),
    (sc.EventWriter, sync.SyncEventWriter, set()),
    (sc.EventReader, sync.SyncEventReader, {"batches"}),
    (StreamWriter, SyncStreamWriter, set()),
    (ReaderGroup, SyncReaderGroup, set()),
    (GroupReader, SyncGroupReader, set()),
    (Transaction, SyncTransaction, set()),
]


@pytest.mark.parametrize(
    ("aio", "blocking", "skip"), PAIRS, ids=lambda x: getattr(x, "__name__", "")
)
def test_sync_facade_signatures_match_the_async_api(
    aio: type, blocking: type, skip: set[str]
) -> None:
    checked = 0
    for name, fn in inspect.getmembers(aio, callable):
        if name.startswith("_") or name in skip:
            continue
        twin = getattr(blocking, name, None)
        assert twin is not None, f"{blocking.__name__} lacks {name}"
        assert params(twin) == params(fn), f"{blocking.__name__}.{name}"
        hints, twin_hints = typing.get_type_hints(fn), typing.get_type_hints(twin)
        for arg, hint in hints.items():
            if arg != "return":
                assert twin_hints.get(arg) == hint, f"{blocking.__name__}.{name}({arg})"
        checked += 1
    assert checked >= 3


def public_callables() -> Iterator[tuple[str, Callable[..., object]]]:
    for module, names in ((sc, sc.__all__), (sync, sync.__all__)):
        for name in names:
            obj = getattr(module, name)
            if inspect.isclass(obj):
                if issubclass(obj, BaseException):
                    continue
                for mname, member in vars(obj).items():
                    if mname.startswith("_") and mname != "__init__":
                        continue
                    if isinstance(member, property):
                        member = member.fget
                    if callable(member):
                        yield f"{name}.{mname}", member
            elif inspect.isfunction(obj):
                yield name, obj


def test_type_hints_resolve_on_every_public_api() -> None:
    failures = []
    n = 0
    for name, fn in public_callables():
        n += 1
        try:
            typing.get_type_hints(fn)
        except Exception as e:
            failures.append(f"{name}: {e}")
    assert n > 100
    assert failures == []


# -- README examples ----------------------------------------------------------------------


def readme_examples() -> list[str]:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    return [b for b in blocks if "127.0.0.1:12345" in b and "spark" not in b.lower()]


def test_readme_examples_run_without_warnings(module_server: ServerProcess) -> None:
    examples = readme_examples()
    assert len(examples) >= 3
    for code in examples:
        code = code.replace("tcp://127.0.0.1:12345", module_server.endpoint)
        proc = subprocess.run(
            [sys.executable, "-W", "error::RuntimeWarning", "-c", code],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, f"{code}\n{proc.stderr}"
        assert proc.stderr == "", f"{code}\n{proc.stderr}"
