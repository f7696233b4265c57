"""``segment write``: append events from arguments, stdin or a file.

Contract: input is read in blocks off the event loop (a thread), split at the delimiter
and handed to one :class:`EventWriter` block by block, so stdin typed by a person is
written line by line and a large file never sits in memory whole; a piece longer than
the largest event is refused before it is buffered further. With ``--writer-id`` the
events are numbered from ``--first-event-number`` (1): running the same command with the
same input again, after a failure or not, writes every event exactly once.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import AsyncIterator, Iterator
from typing import IO, Any

from segmentstore_client import records
from segmentstore_client.protocol import MAX_EVENT_SIZE

from ._cli import CliError, Exit, add_leaf, command, connect, segment_name, status
from ._render import event_from_json
from ._segment_read import unescape

BLOCK = 1 << 20


def add_parsers(sub: Any) -> None:
    w = add_leaf(
        sub,
        "write",
        "append events (arguments, stdin lines, or a file)",
        "Append events to a segment: each EVENT argument is one event; without "
        "arguments, events are read from --file (default stdin), one per line or per "
        "--delimiter. With --writer-id, running the same command again writes nothing "
        "twice (events are numbered from --first-event-number).",
        (
            "segmentstore segment write demo/0 hello world",
            "printf 'a\\nb\\n' | segmentstore segment write demo/0",
            "segmentstore segment write demo/0 --file events.bin --delimiter '\\0'",
            "segmentstore segment write demo/0 --file batch.txt --writer-id loader-1",
            "segmentstore segment cat a/0 --json | segmentstore segment write b/0 --format json",
        ),
        func=command(_write),
    )
    w.add_argument("segment", type=segment_name)
    add_input_options(w)
    w.add_argument(
        "--format",
        choices=("text", "json", "records"),
        default="text",
        help="input pieces are the payloads (text), event JSON lines as `cat --json` "
        "prints them (json), or record JSON lines to encode as record envelopes (records)",
    )
    w.add_argument("--writer-id", help="writer id for exactly-once writing (any string)")
    w.add_argument(
        "--first-event-number",
        type=int,
        default=None,
        help="with --writer-id: number of the first event (default 1)",
    )


def add_input_options(p: argparse.ArgumentParser) -> None:
    """EVENT arguments, ``--file`` and ``--delimiter``: where ``write`` gets its events."""
    p.add_argument("events", nargs="*", metavar="EVENT", help="events to write (UTF-8)")
    p.add_argument("--file", default="-", help="read events from this file (- = stdin)")
    p.add_argument(
        "--delimiter",
        default="\\n",
        help="separates events in the input (escapes \\n \\t \\0 \\xNN; default \\n)",
    )


async def read_blocks(path: str, size: int = BLOCK) -> AsyncIterator[bytes]:
    """The bytes of ``path`` (``-``: stdin) in blocks, read in a thread; a block is what
    one read returned, so a terminal's line arrives as soon as it is typed."""
    f: IO[bytes]
    f = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115
    try:
        fd = f.fileno()
        while block := await asyncio.to_thread(os.read, fd, size):
            yield block
    finally:
        if f is not sys.stdin.buffer:
            f.close()


async def split(blocks: AsyncIterator[bytes], delimiter: bytes) -> AsyncIterator[list[bytes]]:
    """The pieces between delimiters, a list per input block; a last piece without a
    delimiter after it counts, an empty input yields nothing."""
    if not delimiter:
        raise CliError("the delimiter must not be empty", Exit.USAGE)
    rest = b""
    async for block in blocks:
        parts = (rest + block).split(delimiter)
        rest = parts.pop()
        if len(rest) > MAX_EVENT_SIZE:
            raise CliError(
                f"input has a piece over {MAX_EVENT_SIZE} bytes without a delimiter "
                "(the largest event)",
                Exit.BAD_DATA,
            )
        if parts:
            yield parts
    if rest:
        yield [rest]


def _decode(pieces: list[bytes], fmt: str, first_line: int) -> Iterator[bytes]:
    for i, piece in enumerate(pieces):
        if fmt == "text":
            yield piece
        elif piece.strip():
            where = f"input line {first_line + i}"
            if fmt == "json":
                yield event_from_json(piece, where)
            else:
                try:
                    yield records.Record.from_json(piece).encode()
                except ValueError as e:
                    raise CliError(f"{where}: not a record: {e}", Exit.BAD_DATA) from None


async def _write(args: argparse.Namespace) -> int:
    if args.first_event_number is not None and not args.writer_id:
        raise CliError("--first-event-number needs --writer-id", Exit.USAGE)
    first = (args.first_event_number or 1) if args.writer_id else None
    if first is not None and first < 1:
        raise CliError("--first-event-number must be at least 1", Exit.USAGE)
    delimiter = unescape(args.delimiter) if args.format == "text" else b"\n"
    written = 0
    async with connect(args) as client:
        before = None
        if args.writer_id:
            before = await client.last_event_number(args.segment, args.writer_id)
        async with client.writer(args.segment, args.writer_id, first_event_number=first) as writer:
            if args.events:
                events = list(_decode([os.fsencode(e) for e in args.events], args.format, 1))
                await writer.write_many(events)
                written = len(events)
            else:
                if args.file == "-" and sys.stdin.isatty():
                    status(args, "reading events from the terminal, one per line; Ctrl-D ends")
                async for pieces in split(read_blocks(args.file), delimiter):
                    events = list(_decode(pieces, args.format, written + 1))
                    await writer.write_many(events)
                    written += len(events)
            await writer.flush()
    status(args, _summary(args.segment, written, first, before))
    return Exit.OK


def _summary(segment: str, count: int, first: int | None, before: int | None) -> str:
    if first is None or before is None or before < first:
        return f"wrote {count} events to {segment}"
    held = min(count, before - first + 1)
    return f"wrote {count - held} events to {segment} ({held} were there already)"
