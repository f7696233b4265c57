#!/usr/bin/env python3
"""Benchmark of the sans-IO wire codec: encode and decode rates of four typical frames.

    .venv/bin/python scripts/bench_codec.py            # about 10 s, a table
    .venv/bin/python scripts/bench_codec.py --json     # the same figures as JSON

Encode is ``encode(command)`` on a ready command object. Decode is a fresh
``FrameDecoder`` fed a byte stream of such frames in 64 KiB reads, as a socket delivers
them (the 1 MiB SegmentRead therefore takes the decoder's big-frame path). For that frame
the run also times a plain copy of 1 MiB (``bytearray(data)``) and prints decode/copy:
decoding should cost about one copy of the data. Every figure is the best of
``--repeat`` rounds.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "client"))

from segmentstore_client.protocol import (
    AppendBlockEnd,
    Command,
    DataAppended,
    FrameDecoder,
    SegmentRead,
    TableEntry,
    UpdateTableEntries,
    encode,
    frame_events,
)

READ_SIZE = 64 * 1024
STREAM_TARGET = 2 * 1024 * 1024  # bytes of frames per decode round trip of the stream
MIB = 1024 * 1024


@dataclass
class Result:
    name: str
    frame_bytes: int
    encode_per_s: float
    encode_mb_s: float
    decode_per_s: float
    decode_mb_s: float


def best_time(fn: Callable[[], object], seconds: float, repeat: int) -> float:
    """Best wall time of one ``fn()`` call over ``repeat`` rounds of about seconds/repeat."""
    calls, elapsed = 1, 0.0
    while True:  # calibrate: how many calls fill 20 ms
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        elapsed = time.perf_counter() - t0
        if elapsed >= 0.02:
            break
        calls *= 2
    per_round = max(1, int(calls * (seconds / repeat) / elapsed))
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(per_round):
            fn()
        best = min(best, (time.perf_counter() - t0) / per_round)
    return best


def reads_of(stream: bytes) -> list[memoryview]:
    mv = memoryview(stream)
    return [mv[i : i + READ_SIZE] for i in range(0, len(mv), READ_SIZE)]


def bench(name: str, command: Command, seconds: float, repeat: int) -> Result:
    frame = encode(command)
    t_enc = best_time(lambda: encode(command), seconds / 2, repeat)

    count = max(1, STREAM_TARGET // len(frame))
    reads = reads_of(frame * count)

    def decode_stream() -> int:
        dec = FrameDecoder()
        n = 0
        for r in reads:
            n += len(dec.feed(r))
        assert n == count
        return n

    t_dec = best_time(decode_stream, seconds / 2, repeat) / count
    size = len(frame)
    return Result(name, size, 1 / t_enc, size / t_enc / 1e6, 1 / t_dec, size / t_dec / 1e6)


def commands() -> dict[str, Command]:
    rng = random.Random(0)
    w = uuid.UUID(int=rng.getrandbits(128))
    events = frame_events([rng.randbytes(100) for _ in range(100)])
    entries = tuple(TableEntry(rng.randbytes(16), rng.randbytes(100), -1) for _ in range(100))
    return {
        "AppendBlockEnd 100 x 100 B events": AppendBlockEnd(
            w, len(events), events, 100, 1_000_100, 1
        ),
        "SegmentRead 1 MiB": SegmentRead(
            "scope/stream/0.#epoch.0", 1 << 30, False, False, rng.randbytes(MIB), 7
        ),
        "UpdateTableEntries 100 x (16 B, 100 B)": UpdateTableEntries(
            12, "_system/_tables/scope/t", "", entries, -1
        ),
        "DataAppended": DataAppended(w, 1_000_100, 1_000_000, 1, 1 << 32),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=2.0, help="time budget per frame kind")
    ap.add_argument("--repeat", type=int, default=5, help="rounds; the best one counts")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args(argv)

    results = [bench(n, c, args.seconds, args.repeat) for n, c in commands().items()]
    data = bytes(random.Random(1).randbytes(MIB))
    t_copy = best_time(lambda: bytearray(data), args.seconds / 2, args.repeat)
    big = next(r for r in results if r.name.startswith("SegmentRead"))
    t_big = 1 / big.decode_per_s
    summary = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "results": [asdict(r) for r in results],
        "copy_1mib_us": t_copy * 1e6,
        "segment_read_1mib_decode_us": t_big * 1e6,
        "decode_over_copy": t_big / t_copy,
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"Python {summary['python']} on {summary['machine']}, best of {args.repeat}")
    print(
        f"{'frame':40} {'bytes':>8} {'encode/s':>11} {'enc MB/s':>9}"
        f" {'decode/s':>11} {'dec MB/s':>9}"
    )
    for r in results:
        print(
            f"{r.name:40} {r.frame_bytes:>8} {r.encode_per_s:>11,.0f} {r.encode_mb_s:>9,.0f}"
            f" {r.decode_per_s:>11,.0f} {r.decode_mb_s:>9,.0f}"
        )
    print(
        f"1 MiB SegmentRead decode {t_big * 1e6:.0f} us vs bytearray copy of 1 MiB"
        f" {t_copy * 1e6:.0f} us: ratio {t_big / t_copy:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
