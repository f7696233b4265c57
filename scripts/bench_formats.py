#!/usr/bin/env python3
"""Encode and decode rates of the exact formats (100 B values), beside kafka-python's
legacy record code in the same run.

Rows (messages per CPU second of this process, best of ``--reps``, ours and
kafka-python's runs interleaved; no server):

* kafka set encode / decode     a 1,000-message uncompressed message set (magic 1), ours
                                and kafka-python's (LegacyRecordBatchBuilder /
                                MemoryRecords), for codecs none, gzip, snappy, lz4
* kafka message encode / decode one message at a time (the SDK's ``format="kafka"`` path)
* events encode / decode        one namespaced event at a time
* databus encode / decode       when ``formats.databus`` is present
* records encode / decode       the SDK's own envelope, for scale

Usage::

    .venv/bin/python scripts/bench_formats.py            # 7 reps
    .venv/bin/python scripts/bench_formats.py --reps 5 --count 20000
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "client"))

from segmentstore_client import formats, records  # noqa: E402
from segmentstore_client.formats import events, kafka  # noqa: E402

try:
    from kafka.record.legacy_records import LegacyRecordBatchBuilder
    from kafka.record.memory_records import MemoryRecords
except ImportError:  # pragma: no cover
    LegacyRecordBatchBuilder = None

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3}


def best_rate(fn: Callable[[], int], reps: int) -> float:
    best = 0.0
    for _ in range(reps):
        t0 = time.process_time()  # CPU time: other processes on the machine count less
        n = fn()
        best = max(best, n / max(time.process_time() - t0, 1e-6))
    return best


def best_pair(
    ours: Callable[[], int], theirs: Callable[[], int] | None, reps: int
) -> tuple[float, float | None]:
    """Best rates of two runs interleaved rep by rep (the machine's noise hits both)."""
    if theirs is None:
        return best_rate(ours, reps), None
    a = b = 0.0
    for _ in range(reps):
        a = max(a, best_rate(ours, 1))
        b = max(b, best_rate(theirs, 1))
    return a, b


def row(what: str, ours: float, theirs: float | None) -> str:
    if theirs is None:
        return f"{what:<34} {ours:>12,.0f}/s"
    return f"{what:<34} {ours:>12,.0f}/s   kafka-python {theirs:>12,.0f}/s   ratio {ours / theirs:5.2f}"


def kafka_rows(count: int, set_size: int, reps: int) -> list[str]:
    values = [os.urandom(50).hex().encode() for _ in range(set_size)]  # 100 B each
    keys = [b"key-%06d" % i for i in range(set_size)]
    ts = 1_700_000_000_000
    msgs = [kafka.Message(v, k, ts + i) for i, (k, v) in enumerate(zip(keys, values, strict=True))]
    rounds = max(1, count // set_size)
    out = []
    for codec, cid in CODECS.items():
        if not kafka.codec_available(codec):
            out.append(f"kafka set {codec}: codec not installed")
            continue

        def ours_enc(codec: str = codec) -> int:
            for _ in range(rounds):
                kafka.encode_message_set(msgs, codec=codec)
            return rounds * set_size

        def theirs_enc(cid: int = cid) -> int:
            for _ in range(rounds):
                b = LegacyRecordBatchBuilder(1, cid, 1 << 30)
                for i in range(set_size):
                    b.append(i, ts + i, keys[i], values[i])
                b.build()
            return rounds * set_size

        data = kafka.encode_message_set(msgs, codec=codec)

        def ours_dec(data: bytes = data) -> int:
            n = 0
            for _ in range(rounds):
                for m in kafka.decode_message_set(data):
                    n += len(m.value or b"")
            return rounds * set_size

        def theirs_dec(data: bytes = data) -> int:
            n = 0
            for _ in range(rounds):
                recs = MemoryRecords(data)
                while (batch := recs.next_batch()) is not None:
                    for r in batch:
                        r.validate_crc()  # ours always checks every CRC
                        n += len(r.value or b"")
            return rounds * set_size

        have = LegacyRecordBatchBuilder is not None
        enc = best_pair(ours_enc, theirs_enc if have else None, reps)
        dec = best_pair(ours_dec, theirs_dec if have else None, reps)
        out.append(row(f"kafka set encode ({codec})", *enc))
        out.append(row(f"kafka set decode ({codec})", *dec))

    fmt = formats.get("kafka")
    payloads = [kafka.encode_message(v, k, timestamp=ts) for k, v in zip(keys, values, strict=True)]

    def one_enc() -> int:
        for _ in range(rounds):
            for i in range(set_size):
                fmt.encode(values[i], keys[i], timestamp=ts)
        return rounds * set_size

    def one_dec() -> int:
        for _ in range(rounds):
            for p in payloads:
                fmt.decode(p)
        return rounds * set_size

    out.append(row("kafka message encode (format=)", best_rate(one_enc, reps), None))
    out.append(row("kafka message decode (format=)", best_rate(one_dec, reps), None))
    return out


def per_record_rows(
    name: str,
    encode: Callable[[int], bytes],
    decode: Callable[[bytes], object],
    count: int,
    reps: int,
) -> list[str]:
    payloads = [encode(i) for i in range(1000)]

    def enc() -> int:
        for i in range(count):
            encode(i % 1000)
        return count

    def dec() -> int:
        for i in range(count):
            decode(payloads[i % 1000])
        return count

    return [
        row(f"{name} encode", best_rate(enc, reps), None),
        row(f"{name} decode", best_rate(dec, reps), None),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--count", type=int, default=20_000, help="records per measurement")
    ap.add_argument("--set-size", type=int, default=1000, help="messages per Kafka message set")
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; values 100 B; best of {args.reps}"
    )
    lines = kafka_rows(args.count, args.set_size, args.reps)
    value = os.urandom(50).hex().encode()
    lines += per_record_rows(
        "events",
        lambda i: events.encode_event("order.created", value, id=i + 1, namespace="shop"),
        events.decode_event,
        args.count,
        args.reps,
    )
    lines += per_record_rows(
        "records",
        lambda i: records.encode(value, b"key-%06d" % i),
        records.decode,
        args.count,
        args.reps,
    )
    try:
        db = formats.get("databus")
    except ImportError as e:
        lines.append(f"databus: not available in this build ({e})")
    else:
        lines += per_record_rows(
            "databus", lambda i: db.encode(value, b"key-%06d" % i), db.decode, args.count, args.reps
        )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
