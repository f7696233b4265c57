"""``segment cat`` and ``segment tail``: print a segment's events, one per line.

Contract: output goes to stdout in batches (one write and flush per batch the reader
returns, so ``tail -f`` shows an event as soon as it is read); formats are ``text``
(safe one-line rendering), ``json`` (offset, length, next_offset, data or data_b64),
``records`` (the record envelope as JSON), ``kafka`` / ``events`` / ``databus`` (that
exact format decoded, as JSON) and ``raw`` (bytes as stored, each followed by
``--delimiter``). A follower ends when the segment is sealed.
"""

from __future__ import annotations

import argparse
import sys
from collections import deque
from collections.abc import AsyncGenerator, Callable
from typing import Any, Protocol, TypeVar

import segmentstore_client as sc

from ._cli import (
    Exit,
    add_leaf,
    command,
    connect,
    non_negative_int,
    segment_name,
    status,
    write_all,
)
from ._render import event_json, format_json, parse_from, record_json, text_line

# Formats that render an event (offset, payload) as one line of text. An exact format of
# another system (the formats package's seeds) plugs in here with one entry.
LINE_FORMATS: dict[str, Callable[[int, bytes], str]] = {
    "text": lambda offset, data: text_line(data),
    "json": event_json,
    "records": record_json,
    **{name: format_json(name) for name in ("kafka", "events", "databus")},
}
FORMATS = (*LINE_FORMATS, "raw")
FOLLOW_RECONNECT_S = 60.0  # a follower rides out a server restart this long


def add_output_options(p: argparse.ArgumentParser, *, lines: bool = False) -> None:
    """``-f``, the output format options and ``--count`` of ``cat`` (``-n`` of ``tail``
    too, with ``lines``)."""
    if lines:
        p.add_argument(
            "-n", "--lines", type=non_negative_int, default=10, help="last events to print (10)"
        )
    p.add_argument("-f", "--follow", action="store_true", help="wait for new events")
    p.add_argument(
        "--format",
        choices=FORMATS,
        default="text",
        help="text: one safe line per event (default); json: JSON lines; records: decode "
        "record envelopes; kafka, events, databus: decode that format, as JSON lines; "
        "raw: bytes as stored",
    )
    p.add_argument("--json", action="store_true", help="same as --format json")
    p.add_argument(
        "--offsets", action="store_true", help="text format: start lines with the offset"
    )
    p.add_argument(
        "--delimiter",
        default="\\n",
        help="raw format: written after each event (escapes \\n \\t \\0 \\xNN; default \\n)",
    )
    p.add_argument("--count", type=non_negative_int, help="stop after this many events")


def add_parsers(sub: Any) -> None:
    c = add_leaf(
        sub,
        "cat",
        "print a segment's events",
        "Print the events of a segment from its start (or --from) to its current end "
        "(or forever with --follow), one per line.",
        (
            "segmentstore segment cat demo/0",
            "segmentstore segment cat demo/0 --json --from 120 --count 10",
            'segmentstore segment cat demo/0 --from \'{"v":1,"segment":"demo/0","offset":120}\'',
            "segmentstore segment cat demo/0 --format raw --delimiter '\\0' > events.bin",
        ),
        func=command(_cat),
    )
    c.add_argument("segment", type=segment_name)
    c.add_argument(
        "--from",
        dest="start",
        default="start",
        help="offset, position JSON, 'start' (default) or 'end'",
    )
    add_output_options(c)

    t = add_leaf(
        sub,
        "tail",
        "print a segment's last events, and follow it with -f",
        "Print the last N events of a segment (found by reading it from its start) and, "
        "with -f, every event appended later, until the segment is sealed or Ctrl-C.",
        (
            "segmentstore segment tail demo/0",
            "segmentstore segment tail -f demo/0",
            "segmentstore segment tail -n 0 -f demo/0 --json",
        ),
        func=command(_tail),
    )
    t.add_argument("segment", type=segment_name)
    add_output_options(t, lines=True)


def unescape(text: str) -> bytes:
    """A delimiter given on the command line, with \\n, \\t, \\0, \\xNN, \\\\ escapes."""
    decoded = text.encode("latin-1", "backslashreplace").decode("unicode_escape")
    return decoded.encode("latin-1" if max(map(ord, decoded), default=0) < 256 else "utf-8")


class Shown(Protocol):
    """What the output formats need of an event (segment events, stream events)."""

    @property
    def offset(self) -> int: ...

    @property
    def data(self) -> bytes: ...


E = TypeVar("E", bound=Shown)


def renderer(
    args: argparse.Namespace,
    json_line: Callable[[E], str] | None = None,
    label: Callable[[E], str] | None = None,
) -> Callable[[E], bytes]:
    """``--format`` (``--json``, ``--offsets``, ``--delimiter``) as a function from an
    event to its output bytes; ``json_line`` replaces the JSON form and ``label`` the
    offset that ``--offsets`` prints (stream events name their segment too)."""
    fmt = "json" if args.json else args.format
    if fmt == "raw":
        delimiter = unescape(args.delimiter)
        return lambda e: e.data + delimiter
    if fmt == "json" and json_line is not None:
        as_json = json_line
        return lambda e: (as_json(e) + "\n").encode()
    if args.offsets and fmt == "text":
        where = label or (lambda e: str(e.offset))
        return lambda e: f"{where(e)}\t{text_line(e.data)}\n".encode()
    line = LINE_FORMATS[fmt]
    return lambda e: (line(e.offset, e.data) + "\n").encode()


async def print_batches(
    render: Callable[[E], bytes], batches: AsyncGenerator[list[E], None], count: int | None
) -> int:
    """Print events until ``batches`` ends or ``count`` are printed (one write and flush
    a batch); closes ``batches``; returns how many were printed."""
    out = sys.stdout.buffer
    printed = 0
    try:
        async for batch in batches:
            if count is not None:
                batch = batch[: count - printed]
            write_all(out, b"".join([render(e) for e in batch]))
            printed += len(batch)
            if count is not None and printed >= count:
                break
    finally:
        await batches.aclose()
    return printed


async def _reader_batches(reader: sc.EventReader) -> AsyncGenerator[list[sc.Event], None]:
    try:
        while batch := await reader.read_batch():
            yield batch
    finally:
        await reader.close()


async def print_events(args: argparse.Namespace, reader: sc.EventReader, count: int | None) -> int:
    """Print a segment reader's events until it ends or ``count`` are printed."""
    render: Callable[[sc.Event], bytes] = renderer(args)
    return await print_batches(render, _reader_batches(reader), count)


async def _cat(args: argparse.Namespace) -> int:
    where = parse_from(args.start, args.segment)
    reconnect = FOLLOW_RECONNECT_S if args.follow else 0.0
    async with connect(args, reconnect_for=reconnect) as client:
        info = await client.segment_info(args.segment)
        if where == "start":
            offset = info.start_offset
        elif where == "end":
            offset = info.length
        else:
            assert isinstance(where, int)
            offset = where
        if args.count == 0:
            return Exit.OK
        reader = client.reader(args.segment, offset, follow=args.follow)
        await print_events(args, reader, args.count)
    if args.follow:
        status(args, f"{args.segment} is sealed")
    return Exit.OK


async def _tail(args: argparse.Namespace) -> int:
    reconnect = FOLLOW_RECONNECT_S if args.follow else 0.0
    async with connect(args, reconnect_for=reconnect) as client:
        info = await client.segment_info(args.segment)
        offset = info.length
        if args.lines > 0:
            offset = await _offset_of_last(client, args.segment, info, args.lines)
        reader = client.reader(args.segment, offset, follow=args.follow)
        await print_events(args, reader, None if args.follow else args.lines)
    if args.follow:
        status(args, f"{args.segment} is sealed")
    return Exit.OK


async def _offset_of_last(client: sc.Client, segment: str, info: sc.SegmentInfo, n: int) -> int:
    """Offset of the n-th last event below ``info.length`` (or the start offset if the
    segment holds fewer): segments have no index, so this reads from the start."""
    offsets: deque[int] = deque(maxlen=n)
    reader = client.reader(segment, info.start_offset, read_size=4 << 20)
    try:
        while batch := await reader.read_batch():
            offsets.extend(e.offset for e in batch if e.offset < info.length)
            if batch[-1].next_offset >= info.length:
                break
    finally:
        await reader.close()
    return offsets[0] if offsets else info.length
