"""Where a lone event's latency goes (issue 19): SDK ``write()`` -> ack, the server's
append latency, and the commit loop's stages from /metrics.

Starts a server (fsync=always unless --fsync), writes --events events of --size bytes one
at a time through the SDK (the next only after the previous ack; --interval-ms pauses
between them), then scrapes ``segmentstore_commit_stage_seconds`` and
``segmentstore_append_latency_seconds``. A follow reader on its own connection (same
process) gives write() -> tail reader woken; the server wakes tail reads before it acks,
so this is usually below the ack time. The SDK figures are exact percentiles; the server's
are bucket upper bounds (the histograms' resolution) and means. What is left of the SDK's
ack time after the server's append latency is the client and the loopback.

    .venv/bin/python scripts/bench_latency.py                      # 2000 events, 100 B
    .venv/bin/python scripts/bench_latency.py --interval-ms 1 --events 1000
    .venv/bin/python scripts/bench_latency.py --active 100 --events 1000   # 99 more segments
    .venv/bin/python scripts/bench_latency.py --active 100 --background process  # by another client
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import segmentstore_client as sc  # noqa: E402
from bench_peers import background_load, background_process  # noqa: E402

from segmentstore.server.launcher import ServerProcess  # noqa: E402
from segmentstore.storage.stages import STAGE_NAMES  # noqa: E402


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text: str = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("segmentstore_"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


def bucket_quantile(m: dict[str, float], family: str, label: str, q: float) -> float:
    """Upper bound (seconds) of the bucket holding quantile q of one histogram series."""
    sep = "," if label else ""
    rows = []
    for key, count in m.items():
        if key.startswith(family + '_bucket{le="') and key.endswith(sep + label + "}"):
            le = key.split('le="', 1)[1].split('"', 1)[0]
            rows.append((float(le.replace("+Inf", "inf")), count))
    rows.sort()
    total = rows[-1][1] if rows else 0.0
    return next((b for b, c in rows if c >= q * total), float("nan"))


async def write_lone_events(
    endpoint: str,
    n: int,
    size: int,
    interval: float,
    active: int = 1,
    background: str = "client",
) -> tuple[list[float], list[float]]:
    """(write() -> ack, write() -> tail reader woken) of n events; the reader is a follow
    reader on its own connection in this process. ``active`` > 1: that many segments in
    all, the others taking one event each every 10 ms (as bench_peers.py does), written
    by this client and loop (``background="client"``) or by another process with its own
    client (``"process"``)."""
    acks: list[float] = []
    started_at: list[float] = []
    woken_at: list[float] = []
    async with sc.connect(endpoint) as client, sc.connect(endpoint) as tail_client:
        name = "latency/lone/0"
        await client.create_segment(name, exist_ok=True)
        reader = tail_client.reader(name, follow=True)

        async def tail() -> None:
            async for _event in reader:
                woken_at.append(time.perf_counter())
                if len(woken_at) >= n:
                    return

        tailing = asyncio.ensure_future(tail())
        async with contextlib.AsyncExitStack() as stack:
            if active > 1 and background == "process":
                stack.enter_context(background_process(endpoint, name, active - 1))
            elif active > 1:
                stack.enter_context(background_load(client, name, active - 1))
                await asyncio.sleep(1)  # the background writers are set up
            w = await stack.enter_async_context(client.writer(name))
            await w.start()
            for _ in range(n):
                started_at.append(time.perf_counter())
                await (await w.write(b"x" * size))
                acks.append(time.perf_counter() - started_at[-1])
                if interval:
                    await asyncio.sleep(interval)
        await asyncio.wait_for(tailing, 30)
        await reader.close()
    wake = [w - t for w, t in zip(woken_at, started_at, strict=True)]
    return sorted(acks), sorted(wake)


def line(what: str, xs: list[float]) -> str:
    us = 1e6
    return (
        f"{what:<25} p50 {xs[len(xs) // 2] * us:7.0f} us   "
        f"p99 {xs[int(len(xs) * 0.99)] * us:7.0f} us   mean {sum(xs) / len(xs) * us:6.0f} us"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=2000)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--interval-ms", type=float, default=0.0)
    p.add_argument("--active", type=int, default=1, help="segments taking events (see above)")
    p.add_argument(
        "--background",
        default="client",
        choices=("client", "process"),
        help="with --active: the other segments are written by this client and loop, or by "
        "another process with its own client",
    )
    p.add_argument("--fsync", default="always", choices=("always", "interval", "never"))
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-latency-") as data_dir:
        proc = ServerProcess(Path(data_dir), ["--fsync", args.fsync])
        proc.start()
        try:
            acks, wake = asyncio.run(
                write_lone_events(
                    proc.endpoint,
                    args.events,
                    args.size,
                    args.interval_ms / 1000,
                    args.active,
                    args.background,
                )
            )
            m = scrape(proc.http_port)
        finally:
            proc.stop()
    us = 1e6
    print(
        f"fsync={args.fsync}, {args.events} events of {args.size} B one at a time, "
        f"{args.active} segment(s) active"
        + (f" (the others written by: {args.background})" if args.active > 1 else "")
    )
    print(line("SDK write() -> ack", acks))
    print(line("write() -> tail reader", wake))
    fam = "segmentstore_append_latency_seconds"
    mean = m[fam + "_sum"] / max(1.0, m[fam + "_count"])
    print(
        f"server append -> ack      p50 <= {bucket_quantile(m, fam, '', 0.5) * us:5.0f} us   "
        f"p99 <= {bucket_quantile(m, fam, '', 0.99) * us:5.0f} us   mean {mean * us:6.0f} us"
    )
    fam = "segmentstore_commit_stage_seconds"
    for stage in STAGE_NAMES:
        label = f'stage="{stage}"'
        n = m[f"{fam}_count{{{label}}}"]
        mean = m[f"{fam}_sum{{{label}}}"] / max(1.0, n)
        print(
            f"  commit {stage:<12}    p50 <= {bucket_quantile(m, fam, label, 0.5) * us:5.0f} us   "
            f"p99 <= {bucket_quantile(m, fam, label, 0.99) * us:5.0f} us   mean {mean * us:6.0f} us"
        )
    fam = "segmentstore_gc_pause_seconds"
    for gen in range(3):
        label = f'generation="{gen}"'
        n = m.get(f"{fam}_count{{{label}}}", 0.0)
        total = m.get(f"{fam}_sum{{{label}}}", 0.0)
        print(
            f"  gc generation {gen}: {n:6.0f} pauses, "
            f"p99 <= {bucket_quantile(m, fam, label, 0.99) * us:5.0f} us   "
            f"mean {total / max(1.0, n) * us:6.0f} us"
        )


if __name__ == "__main__":
    main()
