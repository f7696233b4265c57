"""``segmentstore import kafka-log`` and ``segmentstore export``: data in other systems'
formats in and out of segments.

Contract: ``import kafka-log FILE --segment NAME`` reads a Kafka 0.10 log segment file
(message sets; compressed wrappers are unpacked by 0.10's offset and timestamp rules)
in bounded chunks and writes one event per message, each an exact Kafka message (key,
value, timestamp, magic kept). The writer id is derived from the file (path, size,
mtime) and events are numbered by message index, so running the same import again after
a failure writes nothing twice. ``export SEGMENT --format F`` writes the segment's
events out: ``kafka`` as a Kafka message set (offsets ``--base-offset``, +1, ...; each
message byte for byte as stored), ``<name>-json`` as one JSON object per line rendered
by that format of the registry (``kafka-json``, ``events-json``, ``records-json``,
``databus-json``). Every failure is one line on stderr and a distinct exit code (the
table in :class:`Exit`); no traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import IO, Any, Final

import segmentstore_client as sc
from segmentstore_client import errors as E
from segmentstore_client import formats
from segmentstore_client.formats import kafka
from segmentstore_client.formats.errors import FormatError
from segmentstore_client.protocol.names import name_problem

from ._cli import CliError, Exit, add_global_options, connect, run, status, timeout

CHUNK: Final = 1024 * 1024
PROGRESS_MIN_BYTES: Final = 8 * 1024 * 1024
EXPORT_FORMATS: Final = ("kafka", "kafka-json", "events-json", "records-json", "databus-json")


def add_parser(subparsers: Any) -> None:
    imp = subparsers.add_parser(
        "import",
        help="load data in another system's format into a segment",
        description="Load data in another system's format into a segment.",
    )
    kinds = imp.add_subparsers(dest="kind", required=True)
    k = kinds.add_parser(
        "kafka-log",
        help="a Kafka 0.10 log segment file (.log)",
        description="Read a Kafka 0.10 log segment file (message sets, compressed wrappers "
        "included) and write one event per message (an exact Kafka message).",
        epilog="examples:\n  segmentstore import kafka-log 00000000000000000000.log "
        "--segment orders/0\n  segmentstore import kafka-log orders.log --segment orders/0 "
        "--endpoint tcp://127.0.0.1:12345",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    k.add_argument("file", help="the .log file")
    k.add_argument("--segment", required=True, help="segment to append to (created if missing)")
    k.add_argument(
        "--max-message-size",
        type=int,
        default=kafka.DEFAULT_MAX_MESSAGE_SIZE,
        help="refuse messages declaring more bytes than this (default 64 MiB)",
    )
    add_global_options(k)
    k.set_defaults(func=_import_handler, prog_="segmentstore import")

    exp = subparsers.add_parser(
        "export",
        help="write a segment's events out in another system's format",
        description="Write a segment's events out: 'kafka' as a Kafka message set (.log "
        "layout), '<format>-json' as JSON lines.",
        epilog="examples:\n  segmentstore export orders/0 --format kafka -o orders.log\n"
        "  segmentstore export changes/0 --format databus-json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    exp.add_argument("segment")
    exp.add_argument("--format", required=True, choices=EXPORT_FORMATS)
    exp.add_argument("-o", "--output", default="-", help="output file (default stdout)")
    exp.add_argument(
        "--base-offset", type=int, default=0, help="Kafka offset of the first message (0)"
    )
    add_global_options(exp)
    exp.set_defaults(func=_export_handler, prog_="segmentstore export")


def _run(args: argparse.Namespace, body: Callable[[sc.Client], Awaitable[None]]) -> int:
    """Check the segment name, connect and run ``body`` through :func:`_cli.run` (one
    line and the exit code of each failure); a value the SDK refuses is a usage error
    and a missing codec a failure, as before these commands shared ``_cli``."""
    problem = name_problem(args.segment)
    if problem:
        print(f"{args.prog_}: bad segment name {args.segment!r}: {problem}", file=sys.stderr)
        return Exit.USAGE

    async def main() -> int:
        try:
            async with connect(args, reconnect_for=timeout(args)) as client:
                await body(client)
        except E.CodecUnavailable as e:
            raise CliError(str(e), Exit.FAILED) from None
        except ValueError as e:
            if isinstance(e, E.CorruptRecord):
                raise
            raise CliError(str(e), Exit.USAGE) from None
        return Exit.OK

    return run(args, main)


# -- import ------------------------------------------------------------------------------


class _Progress:
    """One stderr line per second for inputs of at least PROGRESS_MIN_BYTES."""

    def __init__(self, total: int, quiet: bool) -> None:
        self.total = total
        self.on = not quiet and total >= PROGRESS_MIN_BYTES
        self.last = time.monotonic()

    def update(self, done: int, count: int, *, final: bool = False) -> None:
        now = time.monotonic()
        if not self.on or (not final and now - self.last < 1.0):
            return
        self.last = now
        mib = 1024 * 1024
        pct = 100 * done / self.total if self.total else 100.0
        print(
            f"segmentstore import: {done / mib:.1f} of {self.total / mib:.1f} MiB "
            f"({pct:.0f}%), {count} messages",
            file=sys.stderr,
            flush=True,
        )


def _chunks(f: IO[bytes]) -> Iterator[bytes]:
    while chunk := f.read(CHUNK):
        yield chunk


def _import_handler(args: argparse.Namespace) -> int:
    try:
        f = open(args.file, "rb")  # noqa: SIM115 - closed in the finally below
    except OSError as e:
        print(f"segmentstore import: cannot read {args.file}: {e.strerror}", file=sys.stderr)
        return Exit.LOCAL_IO
    try:
        st = os.fstat(f.fileno())
        ident = f"kafka-log:{os.path.realpath(args.file)}:{st.st_size}:{st.st_mtime_ns}"
        writer_id = uuid.uuid5(uuid.NAMESPACE_URL, ident)
        progress = _Progress(st.st_size, getattr(args, "quiet", False))

        async def body(client: sc.Client) -> None:
            await client.create_segment(args.segment, exist_ok=True)
            dec = kafka.MessageSetDecoder(max_message_size=args.max_message_size)
            count = 0
            async with client.writer(args.segment, writer_id) as w:
                try:
                    for chunk in _chunks(f):
                        msgs = dec.feed(chunk)
                        if msgs:
                            await w.write_many(
                                (m.encode() for m in msgs), first_event_number=count + 1
                            )
                            count += len(msgs)
                        progress.update(dec.consumed, count)
                    dec.finish()
                except FormatError as e:
                    await w.flush()
                    raise CliError(
                        f"{args.file}: {e} (the {count} messages before it were imported)",
                        Exit.BAD_DATA,
                    ) from None
                await w.flush()
            progress.update(dec.consumed, count, final=True)
            status(
                args, f"segmentstore import: {count} messages from {args.file} into {args.segment}"
            )

        return _run(args, body)
    finally:
        f.close()


# -- export ------------------------------------------------------------------------------


def _export_handler(args: argparse.Namespace) -> int:
    fmt_name = args.format.removesuffix("-json")
    as_json = args.format.endswith("-json")
    if args.output == "-" and not as_json and sys.stdout.isatty():
        print(
            "segmentstore export: refusing to write binary Kafka data to a terminal; use -o FILE",
            file=sys.stderr,
        )
        return Exit.USAGE
    try:
        fmt = formats.get(fmt_name)
    except ImportError as e:
        print(f"segmentstore export: the {fmt_name} format is not available: {e}", file=sys.stderr)
        return Exit.FAILED

    async def body(client: sc.Client) -> None:
        out: IO[bytes]
        if args.output == "-":
            out = sys.stdout.buffer
        else:
            try:
                out = open(args.output, "wb")  # noqa: SIM115 - closed below
            except OSError as e:
                raise CliError(f"cannot write {args.output}: {e.strerror}", Exit.LOCAL_IO) from None
        count = 0
        try:
            async for batch in client.reader(args.segment).batches():
                parts: list[bytes] = []
                for ev in batch:
                    try:
                        rec = fmt.decode(ev.data)
                    except ValueError as e:
                        raise CliError(
                            f"{args.segment}: the event at offset {ev.offset} is not a "
                            f"{fmt_name} record: {e}",
                            Exit.BAD_DATA,
                        ) from None
                    if as_json:
                        parts.append(fmt.to_json(rec).encode() + b"\n")
                    else:
                        off = args.base_offset + count
                        parts.append(kafka.LOG_ENTRY.pack(off, len(ev.data)) + ev.data)
                    count += 1
                out.write(b"".join(parts))
            out.flush()
        finally:
            if out is not sys.stdout.buffer:
                out.close()
        where = "stdout" if args.output == "-" else args.output
        status(
            args, f"segmentstore export: {count} {fmt_name} records from {args.segment} to {where}"
        )

    return _run(args, body)
