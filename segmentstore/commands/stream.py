"""``segmentstore stream ...``: create, inspect, scale, seal, truncate and delete the streams
of a running store, through the SDK's stream admin (the controller at ``--controller``).

The administration commands live here; writing and reading (``write``, ``cat``,
``tail``) are in ``_stream_io``, which this module registers.

Contract: a stream is named ``scope/stream``; a stream cut is the SDK's JSON
(``StreamCut.to_json``, what ``stream cut`` prints and Spark's ``startStreamCut`` takes).
A missing scope or stream exits 4, an existing one 5, an unreachable controller 3.
"""

from __future__ import annotations

import argparse
import contextlib
import json
from typing import Any

from segmentstore_client.streams import (
    KeyRange,
    NoSuchStream,
    RetentionPolicy,
    ScalingPolicy,
    StreamInfo,
)

from . import _stream_io
from ._cli import (
    JSON_OBJECT,
    MISSING_OK,
    CliError,
    Exit,
    add_group,
    add_leaf,
    json_lines,
    non_negative_int,
    printable,
    status,
)
from ._render import aligned
from ._stream_io import read_cut, stream_command, stream_connect, stream_name


def positive_int(text: str) -> int:
    value = non_negative_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def add_parser(subparsers: Any) -> None:
    sub = add_group(
        subparsers,
        "stream",
        "create, inspect, write and read streams",
        "Work with the streams of a running segment store, through its "
        "controller (streams live in scopes: `segmentstore scope create` first).",
        (
            "segmentstore stream create shop/orders --segments 4",
            "segmentstore stream write shop/orders --routing-key user-7 hello",
            "segmentstore stream cat shop/orders --json",
            "segmentstore stream tail -f shop/orders",
            "segmentstore stream info shop/orders",
            "segmentstore stream cut shop/orders > tail-cut.json",
        ),
    )

    c = add_leaf(
        sub,
        "create",
        "create a stream",
        "Create a stream in an existing scope: a fixed number of segments (--segments), "
        "or scaled by event or byte rate (--by-rate); optional retention and tags.",
        (
            "segmentstore stream create shop/orders --segments 4",
            "segmentstore stream create shop/clicks --by-rate events --target 1000 "
            "--factor 2 --min 2",
            "segmentstore stream create shop/audit --retain-ms 604800000 --tag pii --tag eu",
        ),
    )
    c.add_argument("stream", type=stream_name)
    c.add_argument("--segments", type=positive_int, default=1, help="fixed segments (default 1)")
    c.add_argument(
        "--by-rate",
        choices=("events", "kbytes"),
        help="scale by events/s or KiB/s per segment instead of a fixed count",
    )
    c.add_argument("--target", type=positive_int, help="--by-rate: target rate per segment")
    c.add_argument("--factor", type=positive_int, help="--by-rate: segments a split makes")
    c.add_argument("--min", type=positive_int, default=1, help="--by-rate: fewest segments")
    keep = c.add_mutually_exclusive_group()
    keep.add_argument("--retain-ms", type=positive_int, help="keep events this long (ms)")
    keep.add_argument("--retain-bytes", type=positive_int, help="keep about this many bytes")
    c.add_argument(
        "--retain-max", type=non_negative_int, default=0, help="retention's upper bound (0: none)"
    )
    c.add_argument("--tag", action="append", default=[], help="a tag (repeat for more)")
    c.add_argument("--exist-ok", action="store_true", help="no error if it exists")
    c.set_defaults(func=stream_command(_create))

    i = add_leaf(
        sub,
        "info",
        "epochs, segments, key ranges, head and tail cuts",
        "Show a stream's segments per epoch with their key ranges, lengths and event "
        "counts, and its head and tail stream cuts, as an aligned table or one JSON object.",
        ("segmentstore stream info shop/orders", "segmentstore stream info shop/orders --json"),
        func=stream_command(_info),
        flags=(JSON_OBJECT,),
    )
    i.add_argument("stream", type=stream_name)

    ls = add_leaf(
        sub,
        "list",
        "names of a scope's streams (or every scope's)",
        "List the streams of a scope, or of every scope without one, one scope/stream per "
        "line (or JSON lines).",
        (
            "segmentstore stream list shop",
            "segmentstore stream list",
            "segmentstore stream list shop --json",
        ),
        func=stream_command(_list),
        flags=(json_lines("stream"),),
    )
    ls.add_argument("scope", nargs="?", help="the scope (default: every scope)")

    s = add_leaf(
        sub,
        "scale",
        "replace all segments by N new ones",
        "Scale a stream by hand: seal its current segments and split the key space into "
        "N equal ranges (or the given --ranges), one new segment each. Prints the new "
        "segments.",
        (
            "segmentstore stream scale shop/orders 8",
            "segmentstore stream scale shop/orders --ranges 0-0.25,0.25-1",
        ),
        func=stream_command(_scale),
        flags=(("--json", "the new segments as JSON lines"),),
    )
    s.add_argument("stream", type=stream_name)
    s.add_argument("segments", type=positive_int, nargs="?", help="new segment count")
    s.add_argument("--ranges", help="explicit key ranges LOW-HIGH,... covering [0, 1)")

    se = add_leaf(
        sub,
        "seal",
        "seal a stream (no more writes)",
        "Seal every segment of a stream: writers are refused, readers reach its end.",
        ("segmentstore stream seal shop/orders",),
        func=stream_command(_seal),
    )
    se.add_argument("stream", type=stream_name)

    d = add_leaf(
        sub,
        "delete",
        "seal and delete a stream",
        "Seal (if needed) and delete a stream and all its segments.",
        (
            "segmentstore stream delete shop/orders",
            "segmentstore stream delete shop/orders --missing-ok",
        ),
        func=stream_command(_delete),
        flags=(MISSING_OK,),
    )
    d.add_argument("stream", type=stream_name)

    t = add_leaf(
        sub,
        "truncate",
        "drop the data before a stream cut",
        "Drop everything before a stream cut: the JSON `stream cut` prints, given as the "
        "argument, as @FILE, as - (stdin), or 'tail' (drop everything written so far).",
        (
            "segmentstore stream truncate shop/orders @cut.json",
            "segmentstore stream cut shop/orders | segmentstore stream truncate shop/orders -",
        ),
        func=stream_command(_truncate),
    )
    t.add_argument("stream", type=stream_name)
    t.add_argument("cut", help="stream cut JSON, @FILE, - or 'tail'")

    cu = add_leaf(
        sub,
        "cut",
        "print the tail (or head) stream cut as JSON",
        "Print the stream's current tail cut (or its head cut with --head) as one line of "
        "JSON: Spark's startStreamCut / endStreamCut, `stream cat --from`, `truncate`.",
        (
            "segmentstore stream cut shop/orders",
            "segmentstore stream cut shop/orders --head",
        ),
        func=stream_command(_cut),
    )
    cu.add_argument("stream", type=stream_name)
    cu.add_argument("--head", action="store_true", help="the head cut instead of the tail")

    _stream_io.add_parsers(sub)


def _scaling(args: argparse.Namespace) -> ScalingPolicy:
    if args.by_rate is None:
        if args.target is not None or args.factor is not None:
            raise CliError("--target and --factor need --by-rate", Exit.USAGE)
        return ScalingPolicy.fixed(args.segments)
    if args.target is None or args.factor is None:
        raise CliError("--by-rate needs --target and --factor", Exit.USAGE)
    make = ScalingPolicy.by_event_rate if args.by_rate == "events" else ScalingPolicy.by_kbytes_rate
    return make(args.target, args.factor, args.min)


def _retention(args: argparse.Namespace) -> RetentionPolicy | None:
    if args.retain_ms is not None:
        return RetentionPolicy.by_time(args.retain_ms, args.retain_max)
    if args.retain_bytes is not None:
        return RetentionPolicy.by_size(args.retain_bytes, args.retain_max)
    if args.retain_max:
        raise CliError("--retain-max needs --retain-ms or --retain-bytes", Exit.USAGE)
    return None


async def _create(args: argparse.Namespace) -> int:
    scaling, retention = _scaling(args), _retention(args)
    async with stream_connect(args) as client:
        created = await client.create_stream(
            args.stream,
            scaling=scaling,
            retention=retention,
            tags=args.tag,
            exist_ok=args.exist_ok,
        )
    status(args, f"created stream {args.stream}" if created else f"{args.stream} exists already")
    return Exit.OK


def _range_dict(r: KeyRange) -> dict[str, Any]:
    return {
        "segment": r.segment,
        "number": r.segment & 0xFFFFFFFF,
        "epoch": r.segment >> 32,
        "low": r.low,
        "high": r.high,
    }


def info_dict(info: StreamInfo) -> dict[str, Any]:
    """``stream info --json``: every field of :class:`StreamInfo`."""
    return {
        "stream": info.stream,
        "sealed": info.sealed,
        "epochs": [[_range_dict(r) for r in epoch] for epoch in info.epochs],
        "segments": [
            {
                **_range_dict(s.range),
                "name": s.name,
                "start_offset": s.start_offset,
                "length": s.length,
                "events": s.events,
                "sealed": s.sealed,
            }
            for s in sorted(info.segments.values(), key=lambda s: s.segment)
        ],
        "head": json.loads(info.head.to_json()),
        "tail": json.loads(info.tail.to_json()),
    }


def _print_info(info: StreamInfo) -> None:
    rows = []
    for epoch, ranges in enumerate(info.epochs):
        for r in sorted(ranges, key=lambda r: r.low):
            s = info.segments.get(r.segment)
            rows.append(
                (
                    epoch,
                    r.segment & 0xFFFFFFFF,
                    r.segment,
                    f"{r.low:.4f}-{r.high:.4f}",
                    "-" if s is None else s.start_offset,
                    "-" if s is None else s.length,
                    "-" if s is None else s.events,
                    "-" if s is None else ("yes" if s.sealed else "no"),
                    info.head.positions.get(r.segment, "-"),
                    info.tail.positions.get(r.segment, "-"),
                )
            )
    headers = ("EPOCH", "SEGMENT", "ID", "KEYS", "START", "LENGTH", "EVENTS", "SEALED")
    print(
        f"stream {printable(info.stream)}: {len(info.epochs)} epoch(s), "
        f"{'sealed' if info.sealed else 'open'}"
    )
    print(aligned((*headers, "HEAD", "TAIL"), rows))
    print(f"head cut: {info.head.to_json()}")
    print(f"tail cut: {info.tail.to_json()}")


async def _info(args: argparse.Namespace) -> int:
    async with stream_connect(args) as client:
        info = await client.stream_info(args.stream)
    if args.json:
        print(json.dumps(info_dict(info), separators=(",", ":")))
    else:
        _print_info(info)
    return Exit.OK


async def _list(args: argparse.Namespace) -> int:
    async with stream_connect(args) as client:
        if args.scope is not None:
            streams = await client.list_streams(args.scope)
        else:  # as `kafka-topics --list`: everything, scope by scope
            streams = []
            for scope in await client.list_scopes():
                with contextlib.suppress(NoSuchStream):  # a scope deleted since it was listed
                    streams += await client.list_streams(scope)
    for name in streams:
        print(json.dumps({"stream": name}) if args.json else printable(name))
    return Exit.OK


def _parse_ranges(text: str) -> list[tuple[float, float]]:
    out = []
    for part in text.split(","):
        low, sep, high = part.strip().partition("-")
        try:
            if not sep:
                raise ValueError
            a, b = float(low), float(high)
        except ValueError:
            raise CliError(f"--ranges: not LOW-HIGH: {part!r}", Exit.USAGE) from None
        if not 0.0 <= a < b <= 1.0:
            raise CliError(f"--ranges: need 0 <= LOW < HIGH <= 1: {part!r}", Exit.USAGE)
        out.append((a, b))
    return out


async def _scale(args: argparse.Namespace) -> int:
    if (args.segments is None) == (args.ranges is None):
        raise CliError("give a segment count or --ranges (one of them)", Exit.USAGE)
    ranges = args.segments if args.ranges is None else _parse_ranges(args.ranges)
    async with stream_connect(args) as client:
        new = await client.scale_stream(args.stream, ranges)
    if args.json:
        for r in new:
            print(json.dumps(_range_dict(r), separators=(",", ":")))
    else:
        print(
            aligned(
                ("SEGMENT", "ID", "KEYS"),
                [(r.segment & 0xFFFFFFFF, r.segment, f"{r.low:.4f}-{r.high:.4f}") for r in new],
            )
        )
    status(args, f"scaled {args.stream} to {len(new)} new segment(s)")
    return Exit.OK


async def _seal(args: argparse.Namespace) -> int:
    async with stream_connect(args) as client:
        await client.seal_stream(args.stream)
    status(args, f"sealed stream {args.stream}")
    return Exit.OK


async def _delete(args: argparse.Namespace) -> int:
    async with stream_connect(args) as client:
        deleted = await client.delete_stream(args.stream, missing_ok=args.missing_ok)
    status(args, f"deleted stream {args.stream}" if deleted else f"{args.stream} did not exist")
    return Exit.OK


async def _truncate(args: argparse.Namespace) -> int:
    async with stream_connect(args) as client:
        if args.cut == "tail":
            cut = (await client.stream_info(args.stream)).tail
        else:
            cut = read_cut(args.cut, args.stream, "truncate")
        await client.truncate_stream(cut)
    status(args, f"truncated {args.stream} before {cut.to_json()}")
    return Exit.OK


async def _cut(args: argparse.Namespace) -> int:
    async with stream_connect(args) as client:
        info = await client.stream_info(args.stream)
    print((info.head if args.head else info.tail).to_json())
    return Exit.OK
