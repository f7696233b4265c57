"""``segmentstore segment ...``: create, inspect, change, read, write, import and export
segments of a running store, through the SDK.

The administration commands live here; reading (``cat``, ``tail``), writing and
import/export are in the private modules this one registers.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from segmentstore_client.protocol.names import encode_name

from . import _segment_io, _segment_read, _segment_write
from ._cli import (
    EXIST_OK,
    MISSING_OK,
    CliError,
    Exit,
    add_group,
    add_leaf,
    command,
    connect,
    json_lines,
    segment_name,
    status,
)
from ._render import aligned, iso_ms, parse_from, text_line

EXIT_CODE_HELP = """exit codes:
  0 ok           3 unreachable   4 no such segment/table   5 already exists
  6 sealed       7 offset outside the readable range   8 condition failed
  9 no such key  10 timeout      11 connection lost   12 bad data
  13 other server refusal   14 local file error   15 not authorized
  2 bad arguments   130 Ctrl-C"""


def add_parser(subparsers: Any) -> None:
    sub = add_group(
        subparsers,
        "segment",
        "create, inspect, read and write segments",
        "Work with the segments of a running segment store.",
        (
            "segmentstore segment create demo/0",
            "segmentstore segment write demo/0 hello world",
            "segmentstore segment cat demo/0 --json",
            "segmentstore segment tail -f demo/0",
            "segmentstore segment info demo/0",
        ),
        epilog_extra=EXIT_CODE_HELP,
    )

    c = add_leaf(
        sub,
        "create",
        "create an empty segment",
        "Create an empty segment.",
        ("segmentstore segment create demo/0", "segmentstore segment create demo/0 --exist-ok"),
        func=command(_create),
        flags=(EXIST_OK,),
    )
    c.add_argument("segment", type=segment_name)

    i = add_leaf(
        sub,
        "info",
        "length, start offset, event count, sealed flag of segments",
        "Show what the store knows about one or more segments, as an aligned table or as "
        "JSON lines (one object per segment).",
        ("segmentstore segment info demo/0", "segmentstore segment info demo/0 demo/1 --json"),
        func=command(_info),
        flags=(json_lines("segment"),),
    )
    i.add_argument("segments", nargs="+", type=segment_name, metavar="segment")

    ls = add_leaf(
        sub,
        "list",
        "names of the segments (tables included), by prefix",
        "List the segments whose names start with PREFIX (all when none is given), sorted by "
        "their UTF-8 bytes: one name per line, or with --long the `info` table of each.",
        (
            "segmentstore segment list",
            "segmentstore segment list orders/ --long",
            "segmentstore segment list orders/ --json",
        ),
        func=command(_list),
        flags=(json_lines("segment"),),
    )
    ls.add_argument("prefix", nargs="?", default="", help="name prefix (default: every segment)")
    ls.add_argument("-l", "--long", action="store_true", help="length, events, sealed, ...")

    s = add_leaf(
        sub,
        "seal",
        "seal a segment (no more appends)",
        "Seal a segment: appends are refused afterwards and readers stop at its end.",
        ("segmentstore segment seal demo/0",),
        func=command(_seal),
    )
    s.add_argument("segment", type=segment_name)

    t = add_leaf(
        sub,
        "truncate",
        "drop the data before an offset",
        "Drop the data before OFFSET (an event boundary: an offset printed by "
        "`cat --json`, or a saved position JSON).",
        (
            "segmentstore segment truncate demo/0 4096",
            "segmentstore segment truncate demo/0 end",
        ),
        func=command(_truncate),
    )
    t.add_argument("segment", type=segment_name)
    t.add_argument("offset", help="offset, position JSON or 'end'")

    d = add_leaf(
        sub,
        "delete",
        "delete a segment",
        "Delete a segment and its data.",
        ("segmentstore segment delete demo/0", "segmentstore segment delete demo/0 --missing-ok"),
        func=command(_delete),
        flags=(MISSING_OK,),
    )
    d.add_argument("segment", type=segment_name)

    m = add_leaf(
        sub,
        "merge",
        "append a segment to another and delete it",
        "Append all of SOURCE to TARGET atomically and delete SOURCE (how transactions "
        "commit; seal SOURCE first so that nothing is appended to it meanwhile). Prints "
        "the target's new length.",
        (
            "segmentstore segment seal demo/0#txn",
            "segmentstore segment merge demo/0 demo/0#txn",
        ),
        func=command(_merge),
    )
    m.add_argument("target", type=segment_name)
    m.add_argument("source", type=segment_name)

    _segment_read.add_parsers(sub)
    _segment_write.add_parsers(sub)
    _segment_io.add_parsers(sub)


async def _create(args: argparse.Namespace) -> int:
    async with connect(args) as client:
        created = await client.create_segment(args.segment, exist_ok=args.exist_ok)
    status(args, f"created {args.segment}" if created else f"{args.segment} exists already")
    return Exit.OK


async def _info_rows(client: Any, names: list[str]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for name in names:
        info = await client.segment_info(name)
        rows.append(
            {
                "segment": info.name,
                "length": info.length,
                "start_offset": info.start_offset,
                "events": await client.event_count(name),
                "sealed": info.sealed,
                "last_modified_ms": info.last_modified,
                "last_modified": iso_ms(info.last_modified),
            }
        )
    return rows


def _print_info(rows: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        for row in rows:
            print(json.dumps(row, separators=(",", ":")))
        return
    headers = ("SEGMENT", "LENGTH", "START", "EVENTS", "SEALED", "MODIFIED")
    table = [
        (
            text_line(encode_name(r["segment"])),  # names may hold bidi and other format marks
            r["length"],
            r["start_offset"],
            r["events"],
            "yes" if r["sealed"] else "no",
            r["last_modified"],
        )
        for r in rows
    ]
    print(aligned(headers, table))


async def _info(args: argparse.Namespace) -> int:
    async with connect(args) as client:
        rows = await _info_rows(client, args.segments)
    _print_info(rows, args.json)
    return Exit.OK


async def _list(args: argparse.Namespace) -> int:
    async with connect(args) as client:
        names = await client.list_segments(args.prefix)
        if args.long:
            _print_info(await _info_rows(client, names), args.json)
            return Exit.OK
    for name in names:
        if args.json:
            print(json.dumps({"segment": name}, separators=(",", ":")))
        else:
            print(text_line(encode_name(name)))
    return Exit.OK


async def _seal(args: argparse.Namespace) -> int:
    async with connect(args) as client:
        await client.seal(args.segment)
    status(args, f"sealed {args.segment}")
    return Exit.OK


async def _truncate(args: argparse.Namespace) -> int:
    where = parse_from(args.offset, args.segment)
    async with connect(args) as client:
        if isinstance(where, str):
            info = await client.segment_info(args.segment)
            offset = info.length if where == "end" else info.start_offset
        else:
            offset = where
        await client.truncate(args.segment, offset)
    status(args, f"truncated {args.segment} before offset {offset}")
    return Exit.OK


async def _delete(args: argparse.Namespace) -> int:
    async with connect(args) as client:
        deleted = await client.delete(args.segment, missing_ok=args.missing_ok)
    status(args, f"deleted {args.segment}" if deleted else f"{args.segment} did not exist")
    return Exit.OK


async def _merge(args: argparse.Namespace) -> int:
    if args.target == args.source:
        raise CliError("a segment cannot be merged into itself", Exit.USAGE)
    async with connect(args) as client:
        length = await client.merge(args.target, args.source)
    sys.stdout.write(f"{length}\n")
    status(args, f"merged {args.source} into {args.target}")
    return Exit.OK
