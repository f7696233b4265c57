#!/usr/bin/env python3
"""Benchmark of table segments (segmentstore.tables.TableStore on the real storage engine).

    .venv/bin/python scripts/bench_tables.py                    # 1,000,000 keys, fsync=always
    .venv/bin/python scripts/bench_tables.py --keys 100000      # smaller recovery table
    .venv/bin/python scripts/bench_tables.py --fsync never --json

In process, no network. Figures:

* conditional updates/s: ``--clients`` tasks, each updating its own key with the version it
  got back (read-modify-write without conflicts), one entry per request; and the same with
  one client (a round trip = one group commit);
* gets/s: single-key ``get`` of random existing keys, one task;
* iteration keys/s: ``read_keys``/``read_entries`` pages of 1000 over the whole big table;
* recovery: the big table (``--keys`` keys of 16 bytes with 100-byte values) is written,
  the store closed and reopened; ``TableStore.open`` (index rebuild) is timed apart from
  the storage engine's own recovery;
* memory per key: tracemalloc's growth across a second ``TableStore.open`` / keys.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import platform
import random
import shutil
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "client"))

from segmentstore.storage import SegmentStore, StoreConfig  # noqa: E402
from segmentstore.tables import (  # noqa: E402
    NO_VERSION,
    NOT_EXISTS,
    TableKeyVersionMismatch,
    TableStore,
)

VALUE = b"v" * 100
LOAD_BATCH = 1000


def key_of(i: int) -> bytes:
    return b"key-%012d" % i  # 16 bytes


async def open_all(data_dir: Path, fsync: str) -> tuple[SegmentStore, TableStore]:
    store = await SegmentStore.open(StoreConfig(data_dir, fsync=fsync))  # type: ignore[arg-type]
    return store, await TableStore.open(store)


async def bench_updates(tables: TableStore, clients: int, seconds: float) -> float:
    name = f"bench/_tables/updates{clients}"
    await tables.create(name)
    done = 0
    stop = time.perf_counter() + seconds

    async def client(c: int) -> None:
        nonlocal done
        key = b"client-%d" % c
        [version] = await tables.update(name, [(key, b"0", NOT_EXISTS)])
        n = 0
        while time.perf_counter() < stop:
            try:
                [version] = await tables.update(name, [(key, b"%d" % (n + 1), version)])
                n += 1
            except TableKeyVersionMismatch:
                # Compaction moved the key (new version), as a client sees it: refetch.
                [found] = await tables.get(name, [key])
                assert found is not None
                version = found[0]
        done += n

    t0 = time.perf_counter()
    await asyncio.gather(*(client(c) for c in range(clients)))
    return done / (time.perf_counter() - t0)


async def load_big(tables: TableStore, name: str, keys: int) -> float:
    await tables.create(name)
    t0 = time.perf_counter()
    inflight: list[asyncio.Future[Any]] = []
    for start in range(0, keys, LOAD_BATCH):
        batch = [
            (key_of(i), VALUE, NO_VERSION) for i in range(start, min(keys, start + LOAD_BATCH))
        ]
        inflight.append(asyncio.ensure_future(tables.update(name, batch)))
        if len(inflight) >= 32:
            await asyncio.gather(*inflight)
            inflight.clear()
    await asyncio.gather(*inflight)
    return keys / (time.perf_counter() - t0)


async def bench_gets(tables: TableStore, name: str, keys: int, seconds: float) -> float:
    rng = random.Random(1)
    n = 0
    t0 = time.perf_counter()
    stop = t0 + seconds
    while time.perf_counter() < stop:
        for _ in range(1000):
            [found] = await tables.get(name, [key_of(rng.randrange(keys))])
            assert found is not None
        n += 1000
    return n / (time.perf_counter() - t0)


async def bench_iteration(tables: TableStore, name: str, entries: bool) -> tuple[float, int]:
    token = b""
    n = 0
    t0 = time.perf_counter()
    for _ in range(10_000_000):  # bounded: pages of 1000
        if entries:
            page_e, token = await tables.read_entries(name, 1000, token)
            got = len(page_e)
        else:
            page_k, token = await tables.read_keys(name, 1000, token)
            got = len(page_k)
        if not got:
            break
        n += got
    return n / (time.perf_counter() - t0), n


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    base = Path(args.data_dir) if args.data_dir else Path(tempfile.mkdtemp(prefix="bench-tables-"))
    data_dir = base / "data"
    if data_dir.exists():
        shutil.rmtree(data_dir)
    out: dict[str, Any] = {
        "fsync": args.fsync,
        "keys": args.keys,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    big = "bench/_tables/big"
    try:
        store, tables = await open_all(data_dir, args.fsync)
        out["cond_updates_per_s_1_client"] = await bench_updates(tables, 1, args.seconds)
        out[f"cond_updates_per_s_{args.clients}_clients"] = await bench_updates(
            tables, args.clients, args.seconds
        )
        out["load_keys_per_s"] = await load_big(tables, big, args.keys)
        out["gets_per_s"] = await bench_gets(tables, big, args.keys, args.seconds)
        rate, n = await bench_iteration(tables, big, entries=False)
        assert n == args.keys, n
        out["iterate_keys_per_s"] = rate
        rate, n = await bench_iteration(tables, big, entries=True)
        out["iterate_entries_per_s"] = rate
        out["table_segment_bytes"] = (await tables.info(big)).length
        await tables.close()
        await store.close()

        gc.collect()
        t0 = time.perf_counter()
        store = await SegmentStore.open(StoreConfig(data_dir, fsync=args.fsync))  # type: ignore[arg-type]
        t1 = time.perf_counter()
        tables = await TableStore.open(store)
        t2 = time.perf_counter()
        out["recovery_store_s"] = t1 - t0
        out["recovery_tables_s"] = t2 - t1
        assert (await tables.info(big)).entry_count == args.keys
        await tables.close()
        del tables
        gc.collect()

        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        tables = await TableStore.open(store)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        total_keys = sum(int(v) for k, v in tables.stats().items() if k == "table_keys")
        out["memory_bytes_per_key"] = (after - before) / max(1, total_keys)
        await tables.close()
        await store.close()
    finally:
        if not args.data_dir:
            shutil.rmtree(base, ignore_errors=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--keys", type=int, default=1_000_000, help="keys in the recovery table")
    p.add_argument("--fsync", choices=["always", "interval", "never"], default="always")
    p.add_argument("--clients", type=int, default=64, help="concurrent updaters")
    p.add_argument("--seconds", type=float, default=3.0, help="duration of each rate test")
    p.add_argument("--data-dir", default="", help="where to put the store (default: a tmp dir)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    out = asyncio.run(main_async(args))
    if args.json:
        print(json.dumps(out, indent=2))
        return
    for k, v in out.items():
        print(f"{k:34s} {v:,.3f}" if isinstance(v, float) else f"{k:34s} {v}")


if __name__ == "__main__":
    main()
