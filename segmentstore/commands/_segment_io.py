"""``segment import`` / ``segment export``: move a segment's events to and from a file.

Contract: two file formats. ``lp`` is a sequence of (4-byte big-endian unsigned length,
payload) pairs, nothing else: exporting what was imported gives the same bytes.
``jsonl`` is one event JSON object per line, as ``cat --json`` prints it (``data`` as
text, or ``data_b64``). A damaged input (a length above the largest event, a file that
ends inside a record, a line that is not an event) stops the import with one line saying
where; the events before it are written. A progress bar (tqdm, on stderr, only on a
terminal and only after the first second) shows bytes done; a summary line gives the
throughput.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import stat
import struct
import sys
import time
from collections.abc import AsyncIterator
from typing import IO, Any, Final

from segmentstore_client.protocol import MAX_EVENT_SIZE

from ._cli import (
    CliError,
    Exit,
    add_leaf,
    command,
    connect,
    non_negative_int,
    segment_name,
    status,
    write_all,
)
from ._render import event_from_json, event_json, parse_from
from ._segment_write import read_blocks, split

_LENGTH: Final = struct.Struct(">I")
PROGRESS_DELAY_ENV: Final = "SEGMENTSTORE_PROGRESS_DELAY"  # seconds before a bar shows (1)
FORMATS = ("auto", "lp", "jsonl")


def add_parsers(sub: Any) -> None:
    i = add_leaf(
        sub,
        "import",
        "append the events of a file (length-prefixed or JSON lines)",
        "Append the events stored in FILE (- = stdin) to a segment. Formats: lp "
        "(4-byte big-endian length, then the payload, repeated) and jsonl (one "
        "`cat --json` object per line); auto picks jsonl for *.jsonl / *.json, else lp.",
        (
            "segmentstore segment import demo/0 events.lp",
            "segmentstore segment import demo/0 events.jsonl --create",
            "segmentstore segment import demo/0 events.lp --writer-id import-1  # resumable",
        ),
        func=command(_import),
    )
    i.add_argument("segment", type=segment_name)
    i.add_argument("file")
    i.add_argument("--format", choices=FORMATS, default="auto", help="file format (auto)")
    i.add_argument("--create", action="store_true", help="create the segment if missing")
    i.add_argument(
        "--writer-id",
        help="writer id: importing the same file again with it writes nothing twice",
    )

    e = add_leaf(
        sub,
        "export",
        "write a segment's events to a file",
        "Write the events of a segment, from its start (or --from) to its current end, to "
        "FILE (- = stdout) as lp (length-prefixed) or jsonl (JSON lines).",
        (
            "segmentstore segment export demo/0 events.lp",
            "segmentstore segment export demo/0 events.jsonl --from 4096 --count 100",
            "segmentstore segment export demo/0 - --format jsonl | jq .data",
        ),
        func=command(_export),
    )
    e.add_argument("segment", type=segment_name)
    e.add_argument("file")
    e.add_argument("--format", choices=FORMATS, default="auto", help="file format (auto)")
    e.add_argument("--from", dest="start", default="start", help="offset, position JSON or 'start'")
    e.add_argument("--count", type=non_negative_int, help="stop after this many events")


def file_format(args: argparse.Namespace) -> str:
    if args.format != "auto":
        return str(args.format)
    return "jsonl" if args.file.endswith((".jsonl", ".json")) else "lp"


def progress(args: argparse.Namespace, total: int | None, desc: str) -> Any:
    """A tqdm bar over bytes on stderr, or a no-op when tqdm is missing or --quiet."""
    try:
        from tqdm import tqdm
    except ImportError:
        return contextlib.nullcontext(_NoBar())
    return tqdm(
        total=total,
        desc=desc,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        delay=float(os.environ.get(PROGRESS_DELAY_ENV) or 1.0),
        mininterval=0.25,
        file=sys.stderr,
        disable=True if getattr(args, "quiet", False) else None,  # None: only on a terminal
    )


class _NoBar:
    def update(self, n: int) -> None:
        pass


async def length_prefixed(
    blocks: AsyncIterator[bytes], name: str, bar: Any
) -> AsyncIterator[list[bytes]]:
    """The events of an ``lp`` stream, a list per input block."""
    buf = b""
    consumed = 0  # file offset of buf[0]
    unpack = _LENGTH.unpack_from
    async for block in blocks:
        bar.update(len(block))
        buf = buf + block if buf else block
        events = []
        pos, end = 0, len(buf)
        while pos + 4 <= end:
            (n,) = unpack(buf, pos)
            if n > MAX_EVENT_SIZE:
                raise CliError(
                    f"{name}: byte {consumed + pos}: record length {n} exceeds the largest "
                    f"event ({MAX_EVENT_SIZE}); not a length-prefixed file?",
                    Exit.BAD_DATA,
                )
            if pos + 4 + n > end:
                break
            events.append(buf[pos + 4 : pos + 4 + n])
            pos += 4 + n
        buf = buf[pos:]
        consumed += pos
        if events:
            yield events
    if buf:
        raise CliError(
            f"{name}: the file ends inside the record at byte {consumed} "
            f"({len(buf)} bytes of it present)",
            Exit.BAD_DATA,
        )


async def json_lines(
    blocks: AsyncIterator[bytes], name: str, bar: Any
) -> AsyncIterator[list[bytes]]:
    """The events of a ``jsonl`` stream, a list per input block."""

    async def counted() -> AsyncIterator[bytes]:
        async for block in blocks:
            bar.update(len(block))
            yield block

    line = 0
    async for pieces in split(counted(), b"\n"):
        events = []
        for piece in pieces:
            line += 1
            if piece.strip():
                events.append(event_from_json(piece, f"{name}: line {line}"))
        if events:
            yield events


def _summary(verb: str, events: int, nbytes: int, seconds: float) -> str:
    seconds = max(seconds, 1e-6)
    mb = nbytes / 1e6
    return (
        f"{verb} {events:,} events ({mb:,.1f} MB) in {seconds:.2f} s: "
        f"{events / seconds:,.0f} events/s, {mb / seconds:,.1f} MB/s"
    )


async def _import(args: argparse.Namespace) -> int:
    fmt = file_format(args)
    size = None
    if args.file != "-":
        st = os.stat(args.file)  # a missing file fails before connecting
        size = st.st_size if stat.S_ISREG(st.st_mode) else None  # pipes: no total
    parse = length_prefixed if fmt == "lp" else json_lines
    count = nbytes = 0
    started = time.perf_counter()
    async with connect(args) as client:
        if args.create:
            await client.create_segment(args.segment, exist_ok=True)
        first = 1 if args.writer_id else None
        async with client.writer(args.segment, args.writer_id, first_event_number=first) as w:
            with progress(args, size, f"import {args.segment}") as bar:
                try:
                    async for events in parse(read_blocks(args.file), args.file, bar):
                        await w.write_many(events)
                        count += len(events)
                        nbytes += sum(map(len, events))
                finally:
                    await w.flush()
    status(args, _summary("imported", count, nbytes, time.perf_counter() - started))
    return Exit.OK


def _encoder(fmt: str) -> Any:
    if fmt == "lp":
        pack = _LENGTH.pack
        return lambda batch: b"".join([b for e in batch for b in (pack(len(e.data)), e.data)])
    return lambda batch: "".join([event_json(e.offset, e.data) + "\n" for e in batch]).encode()


async def _export(args: argparse.Namespace) -> int:
    fmt = file_format(args)
    where = parse_from(args.start, args.segment)
    encode = _encoder(fmt)
    count = nbytes = 0
    started = time.perf_counter()
    async with connect(args) as client:
        info = await client.segment_info(args.segment)
        offset = info.start_offset if where in ("start", "end") else int(where)
        if where == "end":
            offset = info.length
        out: IO[bytes] = sys.stdout.buffer if args.file == "-" else open(args.file, "wb")  # noqa: SIM115
        try:
            reader = client.reader(args.segment, offset, read_size=8 << 20)
            total = max(info.length - offset, 0)
            remaining = args.count
            with progress(args, total, f"export {args.segment}") as bar:
                while remaining is None or remaining > 0:
                    batch = await reader.read_batch()
                    if not batch:
                        break
                    if remaining is not None:
                        batch = batch[:remaining]
                        remaining -= len(batch)
                    write_all(out, encode(batch))
                    bar.update(batch[-1].next_offset - batch[0].offset)
                    count += len(batch)
                    nbytes += batch[-1].next_offset - batch[0].offset - 8 * len(batch)
            await reader.close()
        finally:
            if out is not sys.stdout.buffer:
                out.close()
            else:
                out.flush()
    status(args, _summary("exported", count, nbytes, time.perf_counter() - started))
    return Exit.OK
