"""Filter pushdown for batch reads (opt-in: ``filterPushdown=true``).

Contract: :class:`PushdownReader` implements Spark 4.1+'s ``pushFilters``. Filters on
``_segment`` (``=``, ``IN``) and on ``_offset`` (``=``, ``<``, ``<=``, ``>``, ``>=``,
``IN``) narrow the read: input partitions wholly outside the bounds are not planned and
events outside them are skipped before decoding. Every filter is still handed back to
Spark, which evaluates it on the rows (an ``_offset`` is its event's offset, so a bound
inside an event keeps that event's rows whole). Spark calls ``pushFilters`` only with
``spark.sql.python.filterPushdown.enabled=true`` and fails every read of a source that
implements it while the flag is off (the default), which is why this reader is used
only when asked for.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final

import pyarrow as pa
from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)

from ..reader import Event
from .reader import EventDecoder, SegmentRange, SegmentStoreReader, plan_partitions, read_range

_END: Final = 1 << 62


class _BoundedDecoder(EventDecoder):
    """Decodes only the events whose offsets lie in ``[lo, hi)``."""

    def __init__(
        self,
        output: str,
        schema: Any,
        lo: int,
        hi: int,
        record_format: str | None = None,
        stream: str | None = None,
    ) -> None:
        super().__init__(output, schema, record_format, stream)
        self.lo, self.hi = lo, hi

    def decode(self, segment: str, events: Sequence[Event]) -> Iterator[pa.RecordBatch]:
        kept = [e for e in events if self.lo <= e.offset < self.hi]
        return super().decode(segment, kept)


class PushdownReader(SegmentStoreReader):
    """:class:`~.reader.SegmentStoreReader` with ``pushFilters`` (module docstring).

    Example::

        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
        (spark.read.format("segmentstore").option("offsetColumns", "true")
            .option("filterPushdown", "true")...load().where("_offset >= 1048576"))
    """

    lo: int = 0
    hi: int = _END
    only: frozenset[str] | None = None

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        """Narrow the read by the ``_segment``/``_offset`` filters; return them all."""
        for f in filters:
            path: tuple[str, ...] = tuple(getattr(f, "attribute", ()))
            name = path[0] if len(path) == 1 else None
            if name == "_offset":
                self._offset(f)
            elif name == "_segment":
                if isinstance(f, EqualTo):
                    self._segments({f.value})
                elif isinstance(f, In):
                    self._segments(set(f.value))
            yield f

    def _segments(self, names: set[Any]) -> None:
        wanted = frozenset(str(n) for n in names)
        self.only = wanted if self.only is None else self.only & wanted

    def _offset(self, f: Filter) -> None:
        if isinstance(f, EqualTo):
            lo, hi = int(f.value), int(f.value) + 1
        elif isinstance(f, In):
            vals = [int(v) for v in f.value]
            lo, hi = (min(vals), max(vals) + 1) if vals else (0, 0)
        elif isinstance(f, GreaterThan):
            lo, hi = int(f.value) + 1, _END
        elif isinstance(f, GreaterThanOrEqual):
            lo, hi = int(f.value), _END
        elif isinstance(f, LessThan):
            lo, hi = 0, int(f.value)
        elif isinstance(f, LessThanOrEqual):
            lo, hi = 0, int(f.value) + 1
        else:
            return
        self.lo, self.hi = max(self.lo, lo), min(self.hi, hi)

    def partitions(self) -> list[SegmentRange]:
        """The planned ranges that can hold events within the bounds."""
        return [
            p
            for p in plan_partitions(self.options)
            if (self.only is None or p.segment in self.only)
            and p.start < self.hi
            and p.end > self.lo
        ]

    def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
        """The batches of one range, events outside the bounds skipped undecoded."""
        opts = self.options
        decoder = _BoundedDecoder(
            opts.output, self.schema, self.lo, self.hi, opts.record_format, opts.stream
        )
        return read_range(opts, decoder, partition)
