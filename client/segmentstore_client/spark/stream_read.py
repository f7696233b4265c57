"""Reading whole streams (``option("stream", "scope/stream")``): planning and the
streaming source whose offsets are stream cuts.

Contract: a read of a stream between two cuts is the set of segments the controller's
``getSegmentsBetween`` names for them (every epoch: segments sealed by a scale are
included, successors too), each read from its offset in the start cut (else its start)
to its offset in the end cut (else its length: a segment the end cut does not name is
sealed, so its length is final). The default cuts are the head and the tail (the active
segments at their lengths) at planning time. The spans are then cut into input
partitions exactly as segment reads are (:func:`~.reader.plan_partitions`).

The streaming source's offsets are :class:`~segmentstore_client.streams.StreamCut`
documents (``json.loads(cut.to_json())``): ``latestOffset`` is the tail cut, and a
micro-batch reads the spans between the previous cut and the new one, so events written
to successors after a scale are read in the batch whose end cut is past the scale.
Calls to the controller run on an asyncio loop of their own (:func:`run_async`).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.types import StructType

from ..client import Client
from ..errors import NoSuchSegment
from ..streams.controller_client import segment_name, split_stream
from ..streams.stream_cut import StreamCut
from .connect import run_with_client
from .options import OptionError, ReadOptions

T = TypeVar("T")
Span = tuple[str, int, int]
"""``(segment name, start offset, end offset)``."""


def run_async(options: ReadOptions, work: Callable[[Client], Awaitable[T]]) -> T:
    """``work`` with an async client of the read (see :func:`~.connect.run_with_client`)."""
    return run_with_client(options.endpoint, options.timeouts, options.access, work)


async def head_cut(client: Client, stream: str) -> StreamCut:
    """The stream's head: its first segments at their start offsets."""
    scope, name = split_stream(stream)
    return StreamCut(stream, await client.controller.segments_at(scope, name, 0))


async def tail_cut(client: Client, stream: str) -> StreamCut:
    """The stream's tail: its active segments at their lengths (empty once sealed)."""
    scope, name = split_stream(stream)
    positions: dict[int, int] = {}
    for r in await client.controller.current_segments(scope, name):
        info = await client.segment_info(segment_name(scope, name, r.segment))
        positions[r.segment] = info.length
    return StreamCut(stream, positions)


async def spans_between(client: Client, start: StreamCut, end: StreamCut | None) -> list[Span]:
    """The segment ranges from ``start`` to ``end`` (None: the tail now); see the module
    docstring. Example: ``await spans_between(client, head, tail)``"""
    stream = start.stream
    scope, name = split_stream(stream)
    if end is None:
        end = await tail_cut(client, stream)
    sids = await client.controller.segments_between(
        scope, name, dict(start.positions), dict(end.positions)
    )
    out: list[Span] = []
    for sid in sids:
        seg = segment_name(scope, name, sid)
        try:
            info = await client.segment_info(seg)
        except NoSuchSegment:
            continue  # truncated away or deleted with a retention policy
        a = max(info.start_offset, start.positions.get(sid, 0))
        b = min(info.length, end.positions.get(sid, info.length))
        if b > a:
            out.append((seg, a, b))
    return out


def stream_spans(options: ReadOptions) -> list[Span]:
    """The spans of a batch read of ``options.stream`` (``startStreamCut`` ..
    ``endStreamCut``, default head .. tail)."""
    assert options.stream is not None
    stream = options.stream

    async def work(client: Client) -> list[Span]:
        start = (
            StreamCut.from_json(options.start_cut)
            if options.start_cut
            else await head_cut(client, stream)
        )
        end = StreamCut.from_json(options.end_cut) if options.end_cut else None
        return await spans_between(client, start, end)

    return run_async(options, work)


def _cut_of(offset: dict[str, Any], stream: str) -> StreamCut:
    try:
        cut = StreamCut.from_json(json.dumps(offset))
    except ValueError as e:
        raise OptionError(f"a checkpointed offset of {stream!r} is {e}") from None
    if cut.stream != stream:
        raise OptionError(f"the checkpoint holds offsets of {cut.stream!r}, not {stream!r}")
    return cut


def _offset_of(cut: StreamCut) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(cut.to_json())
    return doc


class StreamCutStreamReader(DataSourceStreamReader):  # type: ignore[misc]
    """The streaming source over a stream; offsets are stream cuts (JSON objects).

    Example::

        spark.readStream.format("segmentstore").option("endpoint", ep) \\
            .option("stream", "shop/orders").option("startingOffsets", "latest").load()
    """

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        assert options.stream is not None
        self.options = options
        self.stream = options.stream
        self.schema = schema

    def initialOffset(self) -> dict[str, Any]:
        """``startingOffsets``: ``earliest`` (head), ``latest`` (tail) or a cut's JSON."""
        spec = self.options.starting_offsets.strip()
        if spec.lower() == "earliest":
            return _offset_of(run_async(self.options, lambda c: head_cut(c, self.stream)))
        if spec.lower() == "latest":
            return _offset_of(run_async(self.options, lambda c: tail_cut(c, self.stream)))
        try:
            given = json.loads(spec)
        except json.JSONDecodeError:
            raise OptionError(
                f"startingOffsets of a stream must be earliest, latest or a stream cut's "
                f"JSON, not {spec!r}"
            ) from None
        if not isinstance(given, dict):
            raise OptionError("startingOffsets JSON must be a stream cut object")
        return _offset_of(_cut_of(given, self.stream))

    def latestOffset(self, *args: Any) -> dict[str, Any]:
        """The tail cut now (read limits are not applied to streams)."""
        return _offset_of(run_async(self.options, lambda c: tail_cut(c, self.stream)))

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[Any]:
        """The input partitions between two cuts (every epoch in between)."""
        from .reader import cut_spans

        a, b = _cut_of(start, self.stream), _cut_of(end, self.stream)
        spans = run_async(self.options, lambda c: spans_between(c, a, b))
        return cut_spans(self.options, spans)

    def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
        """The batches of one segment range."""
        from .reader import EventDecoder, read_range

        decoder = EventDecoder(
            self.options.output, self.schema, self.options.record_format, self.stream
        )
        return read_range(self.options, decoder, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark finished everything up to ``end``; the stream keeps its data."""

    def stop(self) -> None:
        """Nothing to release: every call opens and closes its own client."""
