"""``stream write``, ``stream cat`` and ``stream tail``: events in and out of a stream.

Contract: ``write`` reads its input as ``segment write`` does (arguments, or blocks of a
file or stdin split at a delimiter, never the whole file in memory) and hands it to one
:class:`StreamWriter`, with one ``--routing-key`` for every event or the key taken from
a JSON field of each event (``--key-field``). ``cat`` without ``--group`` or ``-f``
reads the range between two stream cuts (default: head to the current tail) segment by
segment, all segments of an epoch before the next epoch's, so per-key order holds;
with ``--group`` it reads as a reader of that reader group, and ``-f`` follows through a
reader group (a temporary one, deleted at the end, when no ``--group`` is given).
Output formats are those of ``segment cat``; ``--json`` adds the stream and segment id.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import uuid
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from typing import Any, Literal

import segmentstore_client as sc
from segmentstore_client.streams import StreamCut, StreamError
from segmentstore_client.streams.controller_client import segment_name, split_stream
from segmentstore_client.streams.reader_group import StreamEvent

from ._cli import (
    CliError,
    Exit,
    add_leaf,
    command,
    connect,
    status,
)
from ._render import event_dict
from ._segment_read import add_output_options, print_batches, renderer, unescape
from ._segment_write import add_input_options, read_blocks, split

FOLLOW_RECONNECT_S = 60.0  # a follower rides out a server restart this long
Start = Literal["head", "tail"] | StreamCut


def stream_command(
    body: Callable[[argparse.Namespace], Awaitable[int]],
) -> Callable[[argparse.Namespace], int]:
    """:func:`command` whose controller refusals name the scope or stream in words."""

    async def worded(args: argparse.Namespace) -> int:
        try:
            return await body(args)
        except StreamError as e:
            raise _worded(e, args) from e

    return command(worded)


def _worded(e: StreamError, args: argparse.Namespace) -> BaseException:
    stream: str | None = getattr(args, "stream", None)
    scope: str | None = getattr(args, "scope", None) or (stream and stream.partition("/")[0])
    words = {
        "SCOPE_NOT_FOUND": (f"scope {scope!r} does not exist", Exit.NOT_FOUND),
        "SCOPE_EXISTS": (f"scope {scope!r} already exists", Exit.EXISTS),
        "SCOPE_NOT_EMPTY": (
            f"scope {scope!r} is not empty (delete its streams first)",
            Exit.CONFLICT,
        ),
        "STREAM_NOT_FOUND": (f"stream {stream!r} does not exist", Exit.NOT_FOUND),
        "NOT_FOUND": (f"stream {stream!r} does not exist", Exit.NOT_FOUND),
        "STREAM_EXISTS": (f"stream {stream!r} already exists", Exit.EXISTS),
        "STREAM_SEALED": (f"stream {stream!r} is sealed", Exit.SEALED),
        "PRECONDITION_FAILED": (
            f"stream {stream!r}: the controller refused the scale (the new key ranges must "
            "cover [0, 1) exactly, and the stream must not be sealed or scaling)",
            Exit.CONFLICT,
        ),
    }
    if e.status == "PRECONDITION_FAILED" and getattr(args, "stream_command", "") != "scale":
        return e
    if e.status in words and (scope if e.status.startswith("SCOPE") else stream):
        message, code = words[e.status]
        return CliError(message, code)
    return e


def stream_connect(args: argparse.Namespace, *, reconnect_for: float = 0.0) -> sc.Client:
    """:func:`connect`, failing at once with one line when the ``streams`` extra (grpcio)
    is missing; no network traffic yet."""
    client = connect(args, reconnect_for=reconnect_for)
    try:
        client.controller.messages()
    except ImportError as e:
        raise CliError(str(e), Exit.FAILED) from None
    return client


def add_parsers(sub: Any) -> None:
    w = add_leaf(
        sub,
        "write",
        "write events (arguments, stdin lines, or a file)",
        "Write events to a stream: each EVENT argument is one event; without arguments, "
        "events are read from --file (default stdin), one per line or per --delimiter. "
        "Events with the same routing key go to the same segment and are read in order; "
        "without a key they are spread over the segments.",
        (
            "segmentstore stream write shop/orders hello world",
            "segmentstore stream write shop/orders --routing-key user-7 a b c",
            "segmentstore stream write shop/orders --key-field user --file orders.jsonl",
            "printf 'a\\nb\\n' | segmentstore stream write shop/orders",
        ),
        func=stream_command(_write),
    )
    w.add_argument("stream", type=stream_name)
    add_input_options(w)
    key = w.add_mutually_exclusive_group()
    key.add_argument("--routing-key", help="the routing key of every event")
    key.add_argument(
        "--key-field",
        metavar="FIELD",
        help="events are JSON objects; the routing key is this field's value",
    )

    c = add_leaf(
        sub,
        "cat",
        "print a stream's events",
        "Print the events between two stream cuts (default: from the head to the current "
        "tail), one per line; with -f keep following the stream (through a reader group) "
        "until Ctrl-C; with --group read as a reader of that reader group.",
        (
            "segmentstore stream cat shop/orders",
            "segmentstore stream cat shop/orders --json --from @start.json --to @end.json",
            "segmentstore stream cat shop/orders -f --from tail",
            "segmentstore stream cat shop/orders --group billing --reader r1 --count 100",
        ),
        func=stream_command(_cat),
    )
    c.add_argument("stream", type=stream_name)
    c.add_argument(
        "--from",
        dest="start",
        default="head",
        help="stream cut JSON, @FILE, - (stdin), 'head' (default) or 'tail'",
    )
    c.add_argument("--to", dest="end", help="stream cut JSON, @FILE or - (default: the tail)")
    _add_group_options(c)
    add_output_options(c)

    t = add_leaf(
        sub,
        "tail",
        "print a stream's last events, and follow it with -f",
        "Print the last N events of a stream (in the order `cat` prints them) and, with "
        "-f, every event written later, until Ctrl-C.",
        (
            "segmentstore stream tail shop/orders",
            "segmentstore stream tail -f shop/orders",
            "segmentstore stream tail -n 0 -f shop/orders --json",
        ),
        func=stream_command(_tail),
    )
    t.add_argument("stream", type=stream_name)
    add_output_options(t, lines=True)


def stream_name(text: str) -> str:
    """argparse type: ``scope/stream``."""
    try:
        split_stream(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def read_cut(text: str, stream: str, what: str) -> StreamCut:
    """A stream cut given on the command line: JSON, ``@FILE`` or ``-`` (stdin)."""
    if text == "-":
        text = sys.stdin.read()
    elif text.startswith("@"):
        with open(text[1:], encoding="utf-8") as f:
            text = f.read()
    try:
        cut = StreamCut.from_json(text)
    except ValueError as e:
        raise CliError(f"{what}: {e}", Exit.USAGE) from None
    if cut.stream != stream:
        raise CliError(f"{what}: the cut is of stream {cut.stream!r}", Exit.USAGE)
    return cut


def _add_group_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--group",
        help="read as a reader of this reader group (NAME in the stream's scope, or "
        "scope/NAME; created from --from if new, else it keeps its positions)",
    )
    p.add_argument("--reader", help="--group: this reader's id (default cli-HOST-PID)")
    p.add_argument(
        "--idle",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="--group without -f: stop after this long without an event (default 1)",
    )


# -- writing -------------------------------------------------------------------------------


def _keys(pieces: list[bytes], args: argparse.Namespace, first_line: int) -> list[str | None]:
    if args.key_field is None:
        return [args.routing_key] * len(pieces)
    out: list[str | None] = []
    for i, piece in enumerate(pieces):
        where = f"event {first_line + i}"
        try:
            obj = json.loads(piece)
        except ValueError as e:
            raise CliError(f"{where}: not JSON ({e})", Exit.BAD_DATA) from None
        if not isinstance(obj, dict) or args.key_field not in obj:
            raise CliError(f"{where}: no field {args.key_field!r}", Exit.BAD_DATA)
        value = obj[args.key_field]
        out.append(value if isinstance(value, str) else json.dumps(value))
    return out


async def _write(args: argparse.Namespace) -> int:
    written = 0
    async with stream_connect(args) as client, client.stream_writer(args.stream) as writer:
        if args.events:
            events = [os.fsencode(e) for e in args.events]
            await writer.write_many(events, routing_keys=_keys(events, args, 1))
            written = len(events)
        else:
            if args.file == "-" and sys.stdin.isatty():
                status(args, "reading events from the terminal, one per line; Ctrl-D ends")
            async for pieces in split(read_blocks(args.file), unescape(args.delimiter)):
                keys = _keys(pieces, args, written + 1)
                await writer.write_many(pieces, routing_keys=keys)
                written += len(pieces)
        await writer.flush()
    status(args, f"wrote {written} events to {args.stream}")
    return Exit.OK


# -- reading -------------------------------------------------------------------------------


def _json_line(e: StreamEvent) -> str:
    d = {"stream": e.stream, "segment": e.segment, **event_dict(e.offset, e.data)}
    return json.dumps(d, separators=(",", ":"))


def _print(
    args: argparse.Namespace, batches: AsyncGenerator[list[StreamEvent], None], count: int | None
) -> Awaitable[int]:
    """``segment cat``'s output of stream events: JSON lines name the stream and segment,
    ``--offsets`` labels are SEGMENT:OFFSET."""
    render: Callable[[StreamEvent], bytes] = renderer(
        args, _json_line, lambda e: f"{e.segment}:{e.offset}"
    )
    return print_batches(render, batches, count)


async def range_batches(
    client: sc.Client, stream: str, start: Mapping[int, int], end: Mapping[int, int]
) -> AsyncGenerator[list[StreamEvent], None]:
    """The events from cut ``start`` to cut ``end``, in batches: every segment between
    them, epoch by epoch (a predecessor before its successors)."""
    scope, name = split_stream(stream)
    ids = await client.controller.segments_between(scope, name, dict(start), dict(end))
    for sid in sorted(set(ids), key=lambda s: (s >> 32, s & 0xFFFFFFFF)):
        seg = segment_name(scope, name, sid)
        try:
            info = await client.segment_info(seg)
        except sc.errors.NoSuchSegment:
            continue  # deleted by truncation: nothing of it is in the range
        stop = end.get(sid, info.length)
        offset = start.get(sid, info.start_offset)
        if offset >= stop:
            continue
        reader = client.reader(seg, offset)
        try:
            while batch := await reader.read_batch():
                out = [StreamEvent(e.data, stream, sid, e.offset) for e in batch if e.offset < stop]
                if out:
                    yield out
                if batch[-1].next_offset >= stop:
                    break
        finally:
            await reader.close()


async def group_batches(
    client: sc.Client,
    args: argparse.Namespace,
    start: Start,
    group: str | None,
    idle: float | None,
) -> AsyncGenerator[list[StreamEvent], None]:
    """The events a reader of reader group ``group`` gets (a temporary group, deleted at
    the end, when None); ends after ``idle`` seconds without an event unless None."""
    scope, _ = split_stream(args.stream)
    temporary = group is None
    name = f"{scope}/cli-{uuid.uuid4().hex[:12]}" if group is None else group
    if "/" not in name:
        name = f"{scope}/{name}"
    rg = await client.reader_group(name, [args.stream], start)
    reader_id = getattr(args, "reader", None) or f"cli-{socket.gethostname()}-{os.getpid()}"
    reader = rg.reader(reader_id)
    try:
        async for event in reader.events(idle_timeout=idle):
            yield [event]
    finally:
        await reader.close()
        if temporary:
            await rg.table.delete(missing_ok=True)


async def _cat(args: argparse.Namespace) -> int:
    if args.count == 0:
        return Exit.OK
    grouped = args.follow or args.group is not None
    if args.end is not None and grouped:
        raise CliError("--to reads a fixed range: not with -f or --group", Exit.USAGE)
    if args.reader is not None and args.group is None:
        raise CliError("--reader needs --group", Exit.USAGE)
    start: Start = (
        args.start
        if args.start in ("head", "tail")
        else read_cut(args.start, args.stream, "--from")
    )
    reconnect = FOLLOW_RECONNECT_S if args.follow else 0.0
    async with stream_connect(args, reconnect_for=reconnect) as client:
        if grouped:
            idle = None if args.follow else args.idle
            batches = group_batches(client, args, start, args.group, idle)
        else:
            info = await client.stream_info(args.stream)
            begin = info.head if start == "head" else info.tail if start == "tail" else start
            assert isinstance(begin, StreamCut)
            end = info.tail if args.end is None else read_cut(args.end, args.stream, "--to")
            batches = range_batches(client, args.stream, begin.positions, end.positions)
        await _print(args, batches, args.count)
    return Exit.OK


async def _tail(args: argparse.Namespace) -> int:
    reconnect = FOLLOW_RECONNECT_S if args.follow else 0.0
    async with stream_connect(args, reconnect_for=reconnect) as client:
        info = await client.stream_info(args.stream)
        if args.lines > 0:
            last: deque[StreamEvent] = deque(maxlen=args.lines)
            batches = range_batches(client, args.stream, info.head.positions, info.tail.positions)
            async for batch in batches:
                last.extend(batch)
            await _print(args, _once(list(last)), None)
        if args.follow:
            args.reader = None
            await _print(args, group_batches(client, args, info.tail, None, None), None)
    return Exit.OK


async def _once(events: list[StreamEvent]) -> AsyncGenerator[list[StreamEvent], None]:
    if events:
        yield events
