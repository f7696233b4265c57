"""``segmentstore bench``: a quick writer/reader benchmark against any endpoint.

Contract: writes ``--events`` events of ``--size`` bytes to a fresh scratch segment with
one writer (``write`` per event, batched by the SDK), measuring each event's ack latency
(from its ``write`` call to its acknowledgement); then reads them all back with one
reader; prints events/s, MB/s and latency percentiles, optionally a terminal histogram
(``--chart``) or a PNG (``--png``, needs matplotlib), and deletes the segment unless
``--keep``. The server's fsync mode decides the write figures; the client cannot see it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

import segmentstore_client as sc

from ._cli import (
    CliError,
    Exit,
    add_global_options,
    command,
    connect,
    examples,
    segment_name,
    status,
)
from ._render import aligned

PERCENTILES = (50.0, 90.0, 99.0, 99.9)


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "bench",
        help="quick write/read benchmark against a store",
        description="Write events to a scratch segment and read them back; print events/s, "
        "MB/s and ack latency percentiles. The figures depend on the server's --fsync "
        "mode, which the client cannot see: say it when you quote them.",
        epilog=examples(
            "segmentstore bench",
            "segmentstore bench --events 200000 --size 1024 --chart",
            "segmentstore bench --endpoint tcp://10.0.0.5:12345 --json",
            "segmentstore bench --png latency.png",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_global_options(p)
    p.add_argument("--events", type=_count, default=100_000, help="events to write (100000)")
    p.add_argument("--size", type=_size, default=100, help="bytes per event (100)")
    p.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="events per second to offer (default 0: as fast as possible, which measures "
        "latency under queueing; a rate below the maximum measures the store's latency)",
    )
    p.add_argument("--segment", type=segment_name, help="segment to use (default: a fresh one)")
    p.add_argument("--keep", action="store_true", help="do not delete the segment afterwards")
    p.add_argument("--chart", action="store_true", help="print a histogram of ack latencies")
    p.add_argument("--png", metavar="FILE", help="save latency charts as a PNG (matplotlib)")
    p.add_argument("--json", action="store_true", help="one JSON object with the results")
    p.set_defaults(func=command(_bench))


def _count(text: str) -> int:
    n = int(text)
    if not 1 <= n <= 100_000_000:
        raise argparse.ArgumentTypeError("events must be within 1..100000000")
    return n


def _size(text: str) -> int:
    n = int(text)
    if not 0 <= n <= 8 * 1024 * 1024:
        raise argparse.ArgumentTypeError("size must be within 0..8388608 bytes")
    return n


@dataclass
class Result:
    endpoint: str
    segment: str
    events: int
    size: int
    write_s: float
    read_s: float
    write_events_per_s: float
    write_mb_per_s: float
    read_events_per_s: float
    read_mb_per_s: float
    ack_ms: dict[str, float]


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


async def _write(
    client: sc.Client, segment: str, events: int, size: int, rate: float
) -> tuple[float, list[float]]:
    """Write and time; returns (seconds, ack latency per event in seconds)."""
    payload = b"b" * size
    submitted = [0.0] * events
    latency = [0.0] * events
    clock = time.perf_counter

    def on_ack(first: int, last: int) -> Any:
        def done(ack: sc.Ack) -> None:
            now = clock()
            for i in range(first, last):
                latency[i] = now - submitted[i]

        return done

    async with client.writer(segment) as w:
        started = clock()
        ack = None
        first = 0
        for i in range(events):
            if rate > 0:
                ahead = started + i / rate - clock()
                if ahead > 0.001:
                    await asyncio.sleep(ahead)
            submitted[i] = clock()
            a = await w.write(payload)
            if a is not ack:
                if ack is not None:
                    ack.add_done_callback(on_ack(first, i))
                ack, first = a, i
        assert ack is not None
        ack.add_done_callback(on_ack(first, events))
        await w.flush()
        elapsed = clock() - started
    return elapsed, latency


async def _read(client: sc.Client, segment: str, events: int) -> float:
    started = time.perf_counter()
    seen = 0
    reader = client.reader(segment, 0, read_size=8 << 20)
    try:
        while batch := await reader.read_batch():
            seen += len(batch)
    finally:
        await reader.close()
    if seen != events:
        raise CliError(f"read back {seen} events instead of {events}", Exit.BAD_DATA)
    return time.perf_counter() - started


async def _bench(args: argparse.Namespace) -> int:
    segment = args.segment or f"_bench/{uuid.uuid4().hex}/0"
    async with connect(args) as client:
        await client.create_segment(segment, exist_ok=bool(args.segment))
        if args.segment and (await client.segment_info(segment)).length:
            raise CliError(f"segment {segment!r} is not empty", Exit.USAGE)
        try:
            write_s, latency = await _write(client, segment, args.events, args.size, args.rate)
            read_s = await _read(client, segment, args.events)
        finally:
            if not args.keep:
                await client.delete(segment, missing_ok=True)
    ordered = sorted(latency)
    ack_ms = {f"p{p:g}": percentile(ordered, p) * 1000 for p in PERCENTILES}
    ack_ms["max"] = ordered[-1] * 1000
    mb = args.events * args.size / 1e6
    result = Result(
        str(client.endpoint),
        segment,
        args.events,
        args.size,
        write_s,
        read_s,
        args.events / write_s,
        mb / write_s,
        args.events / read_s,
        mb / read_s,
        ack_ms,
    )
    if args.json:
        print(json.dumps(asdict(result)))
    else:
        _report(result)
    if args.chart:
        print(histogram(ordered))
    if args.png:
        save_png(args.png, ordered, result)
        status(args, f"saved {args.png}")
    return Exit.OK


def _report(r: Result) -> None:
    print(f"{r.events:,} events of {r.size} B to {r.segment} at {r.endpoint}")
    print("(write figures depend on the server's --fsync mode)\n")
    print(
        aligned(
            ("", "EVENTS/S", "MB/S", "SECONDS"),
            [
                (
                    "write",
                    f"{r.write_events_per_s:,.0f}",
                    f"{r.write_mb_per_s:,.1f}",
                    f"{r.write_s:.2f}",
                ),
                (
                    "read",
                    f"{r.read_events_per_s:,.0f}",
                    f"{r.read_mb_per_s:,.1f}",
                    f"{r.read_s:.2f}",
                ),
            ],
        )
    )
    print()
    names = list(r.ack_ms)
    print(
        aligned(
            ("ACK MS", *[n.upper() for n in names]), [("", *[f"{r.ack_ms[n]:.3f}" for n in names])]
        )
    )


def histogram(ordered: list[float], width: int = 40) -> str:
    """Ack latencies in power-of-two millisecond buckets, as a bar chart."""
    buckets: dict[int, int] = {}
    for v in ordered:
        ms = v * 1000
        b = 0 if ms <= 0.0625 else math.ceil(math.log2(ms / 0.0625))
        buckets[b] = buckets.get(b, 0) + 1
    top = max(buckets.values())
    lines = ["ack latency (ms)  events"]
    for b in range(min(buckets), max(buckets) + 1):
        n = buckets.get(b, 0)
        bar = "█" * max(1 if n else 0, round(n / top * width))
        lines.append(f"  <= {0.0625 * 2**b:9.4g}  {bar} {n:,}")
    return "\n".join(lines)


def save_png(path: str, ordered: list[float], r: Result) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CliError(
            "--png needs matplotlib: pip install 'segmentstore[plot]'", Exit.USAGE
        ) from None
    ms = [v * 1000 for v in ordered]
    fig, (hist, cdf) = plt.subplots(1, 2, figsize=(10, 4))
    hist.hist(ms, bins=50)
    hist.set_xlabel("ack latency (ms)")
    hist.set_ylabel("events")
    step = max(1, len(ms) // 2000)  # a few thousand points draw the same curve
    idx = range(0, len(ms), step)
    cdf.plot([ms[i] for i in idx], [(i + 1) / len(ms) * 100 for i in idx])
    cdf.set_xscale("log")
    cdf.set_xlabel("ack latency (ms)")
    cdf.set_ylabel("percent of events")
    fig.suptitle(
        f"{r.events:,} x {r.size} B: write {r.write_events_per_s:,.0f} ev/s, "
        f"read {r.read_events_per_s:,.0f} ev/s ({r.endpoint})"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
