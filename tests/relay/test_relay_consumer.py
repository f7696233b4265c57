"""The SDK's relay consumer: killed (SIGKILL) and restarted from its persisted checkpoint,
with a server restart in between, it reads every one of 100 000 events exactly once; the
file checkpoint store resumes a clean stop with no gap and no duplicate."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from segmentstore_client.relay import (
    FileCheckpointStore,
    RelayConsumer,
    RelayError,
)

from .helpers import db_windows, source_name, unique_segment, write

if TYPE_CHECKING:
    from conftest import ServerFactory, ServerProcess

CHILD = Path(__file__).with_name("consumer_child.py")
TOTAL = 100_000


def _keys(journal: Path) -> list[int]:
    if not journal.exists():
        return []
    return [int(x) for x in journal.read_bytes().splitlines() if x and not x.startswith(b"#")]


def _wait_for(journal: Path, count: int, child: subprocess.Popen[bytes], limit: float) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if len(_keys(journal)) >= count:
            return
        if child.poll() is not None and len(_keys(journal)) < count:
            raise AssertionError(
                f"consumer exited early: {child.stderr.read() if child.stderr else ''!r}"
            )
        time.sleep(0.05)
    raise AssertionError(f"consumer did not reach {count} events in {limit}s")


async def test_killed_consumer_and_restarted_server_read_each_event_once(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    srv = server_factory(extra_args=["--fsync", "interval"])
    srv.start()
    seg = unique_segment("consumer")
    await write(srv.endpoint, seg, db_windows(TOTAL // 10, 10))
    journal = tmp_path / "journal"
    url = f"http://127.0.0.1:{srv.http_port}"
    args = [sys.executable, str(CHILD), url, source_name(seg), str(journal), str(TOTAL)]

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(args, stderr=subprocess.PIPE)

    child = start()
    try:
        _wait_for(journal, 20_000, child, 60)
        child.kill()  # SIGKILL mid-stream
        child.wait(10)
        child = start()
        _wait_for(journal, 50_000, child, 60)
        srv.stop()  # the relay goes away under the consumer, then comes back
        srv.restart()
        _wait_for(journal, TOTAL, child, 120)
        assert child.wait(30) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
    assert _keys(journal) == list(range(TOTAL))


async def test_file_checkpoint_store_resumes_and_counts(
    module_server: ServerProcess, tmp_path: Path
) -> None:
    seg = unique_segment()
    await write(module_server.endpoint, seg, db_windows(30, 4))
    url = f"http://127.0.0.1:{module_server.http_port}"
    store = FileCheckpointStore(tmp_path / "cp" / "orders.ckpt")
    seen: list[int] = []
    ends: list[int] = []
    async with RelayConsumer(
        url,
        [source_name(seg)],
        checkpoint_store=store,
        size=2500,  # about two windows of JSON per answer
        hold_ms=0,
        output="json",
        on_event=lambda e: seen.append(int(e.key)),  # type: ignore[arg-type]
        on_window_end=ends.append,
    ) as first:
        assert await first.run(max_events=40) >= 40
        assert first.stats.windows >= 10 and first.stats.requests >= 2
    resumed_from = len(seen)
    assert resumed_from % 4 == 0  # whole windows only
    async with RelayConsumer(
        url,
        [source_name(seg)],
        checkpoint_store=store,
        hold_ms=0,
        on_event=lambda e: seen.append(int(e.key)),  # type: ignore[arg-type]
    ) as second:
        await second.poll()
        assert await second.poll() == []
        assert second.stats.no_events == 1
    assert seen == list(range(120))
    assert ends[: resumed_from // 4] == list(range(100, 100 + resumed_from // 4))


async def test_consumer_reports_refusals(module_server: ServerProcess) -> None:
    url = f"http://127.0.0.1:{module_server.http_port}"
    async with RelayConsumer(url, ["no.such.source"], hold_ms=0) as consumer:
        try:
            await consumer.poll()
        except RelayError as e:
            assert "404" in str(e) and "unknown source" in str(e)
        else:
            raise AssertionError("an unknown source was accepted")


async def test_consumer_retries_until_the_relay_is_back(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    srv = server_factory()
    srv.start()
    seg = unique_segment()
    await write(srv.endpoint, seg, db_windows(3, 2))
    url = f"http://127.0.0.1:{srv.http_port}"
    srv.stop()
    consumer = RelayConsumer(url, [source_name(seg)], hold_ms=0, max_backoff=0.2)
    polling = asyncio.ensure_future(consumer.poll())
    await asyncio.sleep(0.8)
    assert not polling.done()
    srv.restart()
    events = await asyncio.wait_for(polling, 20)
    assert [e.key for e in events] == list(range(6))
    assert consumer.stats.reconnects >= 2
    await consumer.close()


async def test_table_checkpoint_store(module_server: ServerProcess) -> None:
    import segmentstore_client as sc
    from segmentstore_client.relay import TableCheckpointStore

    seg = unique_segment()
    await write(module_server.endpoint, seg, db_windows(6, 2))
    url = f"http://127.0.0.1:{module_server.http_port}"
    seen: list[int] = []
    async with sc.connect(module_server.endpoint) as client:
        table = f"relaytest/{seg.split('/')[1]}"
        store = TableCheckpointStore(client, table, "reader-1")
        assert await store.load() is None
        async with RelayConsumer(
            url, [source_name(seg)], checkpoint_store=store, size=200, hold_ms=0, gzip=True,
            on_event=lambda e: seen.append(int(e.key)),  # type: ignore[arg-type]
        ) as consumer:  # fmt: skip
            await consumer.poll()
        saved = await TableCheckpointStore(client, table, "reader-1").load()
        assert saved is not None and saved == consumer.checkpoint
        async with RelayConsumer(
            url, [source_name(seg)], checkpoint_store=TableCheckpointStore(client, table, "reader-1"),
            hold_ms=0, on_event=lambda e: seen.append(int(e.key)),  # type: ignore[arg-type]
        ) as again:  # fmt: skip
            await again.poll()
    assert seen == list(range(12))
