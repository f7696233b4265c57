"""Options of the ``segmentstore`` Spark data source, and the identities derived from them.

Every option is a string (Spark passes them so); this module parses and checks them once,
on the driver, so that a typo fails the query before any task starts.

Identities (all ``uuid5`` in :data:`NAMESPACE`, so every process derives the same ones):

* the **write identity**: from ``write_id`` when given (a driver retry with the same
  ``write_id`` is then the same write), else a random UUID drawn once per write on the
  driver (stable across task retries and speculative attempts, which all run the same
  pickled writer). A streaming write's identity is ``(query id, batch id)``.
* a partition's **writer id**: ``uuid5(write identity | target segment | partition id)``.
  The task attempt number never enters it: every attempt of a partition writes as the same
  writer, so the server drops what an earlier attempt already stored.
* a partition's **transaction segment** (``atomic``):
  ``<target>#transaction.<32 hex digits>``, derived the same way.
* the **commit marker**: a segment attribute of the target whose value is the highest
  committed sequence number of a deterministic write scope (0 for a ``write_id`` batch
  write; the batch id for a streaming query).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from .codec import COMPRESSIONS, ENCODINGS

NAMESPACE: Final = uuid.UUID("0b6f64a4-7d0e-5c55-9a8e-2f3f1e5b7c11")
"""uuid5 namespace of every identity the Spark integration derives."""

DEFAULT_ROWS_PER_EVENT: Final = 10_000
"""Rows per event: Spark's default Arrow batch size, so events need no re-cutting."""
MAX_ROWS_PER_EVENT: Final = 1 << 20
PIECE_BITS: Final = 21
"""Event numbers are ``(group << PIECE_BITS) + 2 * piece + 1`` (see :func:`event_number`)."""
DEFAULT_MAX_EVENT_BYTES: Final = 4 * 1024 * 1024
LIMIT_EVENT_BYTES: Final = 8 * 1024 * 1024 - 64 * 1024
DEFAULT_PARTITION_BYTES: Final = 16 * 1024 * 1024
OUTPUTS: Final = ("rows", "raw", "records")


class OptionError(ValueError):
    """A data source option is missing or has a value it cannot take."""


def _get(options: Mapping[str, str], name: str) -> str | None:
    # Spark hands over a case-insensitive dict; plain dicts (tests, helpers) may not be.
    value = options.get(name)
    if value is None:
        value = options.get(name.lower())
    return None if value is None else str(value)


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _get(options, name)
    if raw is None:
        return default
    v = raw.strip().lower()
    if v in ("true", "1", "yes", "on"):
        return True
    if v in ("false", "0", "no", "off"):
        return False
    raise OptionError(f"option {name!r} must be true or false, not {raw!r}")


def _int(options: Mapping[str, str], name: str, default: int, lo: int, hi: int) -> int:
    raw = _get(options, name)
    if raw is None:
        return default
    try:
        value = int(raw.strip().replace("_", ""))
    except ValueError:
        raise OptionError(f"option {name!r} must be an integer, not {raw!r}") from None
    if not lo <= value <= hi:
        raise OptionError(f"option {name!r} must be within {lo}..{hi}, not {value}")
    return value


def _choice(options: Mapping[str, str], name: str, default: str, choices: tuple[str, ...]) -> str:
    raw = _get(options, name)
    if raw is None:
        return default
    v = raw.strip().lower()
    if v not in choices:
        raise OptionError(f"option {name!r} must be one of {', '.join(choices)}, not {raw!r}")
    return v


def parse_segments(options: Mapping[str, str]) -> tuple[str, ...]:
    """The segment names of ``segment`` (one) or ``segments`` (comma-separated).

    Example::

        parse_segments({"segments": "orders/0, orders/1"})   # ('orders/0', 'orders/1')
    """
    one, many = _get(options, "segment"), _get(options, "segments")
    if one is not None and many is not None:
        raise OptionError("give either 'segment' or 'segments', not both")
    raw = one if one is not None else many
    if raw is None:
        raise OptionError("option 'segment' (or 'segments') is required")
    names = (raw.strip(),) if one is not None else tuple(s.strip() for s in raw.split(","))
    names = tuple(n for n in names if n)
    if not names:
        raise OptionError("no segment name given")
    if len(set(names)) != len(names):
        raise OptionError(f"segment names repeat: {raw!r}")
    return names


def parse_endpoint(options: Mapping[str, str]) -> str:
    """The ``endpoint`` option (``tcp://host:port``), checked for shape."""
    raw = _get(options, "endpoint")
    if raw is None or not raw.strip():
        raise OptionError("option 'endpoint' (tcp://host:port) is required")
    from ..connection import Endpoint

    try:
        Endpoint.parse(raw)
    except ValueError as e:
        raise OptionError(str(e)) from None
    return raw.strip()


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """Parsed options of ``df.write.format("segmentstore")`` and ``writeStream``.

    ============== ======== ============================================================
    option         default  meaning
    ============== ======== ============================================================
    endpoint       required ``tcp://host:port`` of the segment store
    segment(s)     required target segment, or comma-separated segments (partition
                            ``p`` writes to ``segments[p % n]``)
    write_id       random   names the logical write; the same ``write_id`` makes a driver
                            retry resume instead of duplicating (batch writes)
    atomic         false    write to transaction segments, merge them into the targets
                            only on commit (nothing visible after an abort)
    encoding       arrow    ``arrow`` (Arrow IPC stream per event) or ``msgpack``
    rows_per_event 10000    rows per event; fixed, so event numbers follow row positions
    max_event_bytes 4 MiB   events above this are split (deterministically) in halves
    compression    zstd     ``none``, ``lz4`` or ``zstd``: Arrow IPC buffer compression
                   (arrow)  (built into pyarrow); for msgpack the record envelope's codec
                            (default ``none``; lz4/zstd need the ``lz4``/``zstandard``
                            packages)
    create         true     create missing target segments
    timeout        600      seconds a task waits for its events to become durable
    recordFormat   none     write each row's ``key, value, timestamp, headers`` as one
                            record of this format (``kafka``, ``events``, ``databus``,
                            ``records``); rows_per_event is then 1
    ============== ======== ============================================================
    """

    endpoint: str
    segments: tuple[str, ...]
    write_id: str | None
    atomic: bool
    encoding: str
    rows_per_event: int
    max_event_bytes: int
    compression: str
    create: bool
    timeout: float
    record_format: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteOptions:
        """Parse and check the options; raises :class:`OptionError`.

        Example::

            WriteOptions.parse({"endpoint": "tcp://127.0.0.1:12345", "segment": "s"})
        """
        write_id = _get(options, "write_id")
        if write_id is not None and not write_id.strip():
            raise OptionError("option 'write_id' must not be empty")
        encoding = _choice(options, "encoding", "arrow", ENCODINGS)
        record_format = _record_format(options)
        return cls(
            endpoint=parse_endpoint(options),
            segments=parse_segments(options),
            write_id=write_id.strip() if write_id is not None else None,
            atomic=_bool(options, "atomic", False),
            encoding=encoding,
            rows_per_event=1
            if record_format
            else _int(options, "rows_per_event", DEFAULT_ROWS_PER_EVENT, 1, MAX_ROWS_PER_EVENT),
            max_event_bytes=_int(
                options, "max_event_bytes", DEFAULT_MAX_EVENT_BYTES, 1024, LIMIT_EVENT_BYTES
            ),
            compression=_choice(
                options, "compression", "zstd" if encoding == "arrow" else "none", COMPRESSIONS
            ),
            create=_bool(options, "create", True),
            timeout=float(_int(options, "timeout", 600, 1, 86_400)),
            record_format=record_format,
        )

    def target_of(self, partition: int) -> str:
        """The target segment of a partition."""
        return self.segments[partition % len(self.segments)]


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """Parsed options of ``spark.read.format("segmentstore")`` and ``readStream``.

    ================== ========= ========================================================
    option             default   meaning
    ================== ========= ========================================================
    endpoint           required  ``tcp://host:port``
    segment(s)         required  the segment(s) to read
    output             rows      ``rows``: the records' columns; ``raw``: ``segment,
                                 offset, next_offset, data``; ``records``: the record
                                 envelope (``key, value, headers, timestamp`` + offsets)
    schema             inferred  DDL of the rows (``spark.read.schema(...)`` works too);
                                 inferred from the first event when not given
    offset_columns     false     rows output: add ``_segment`` and ``_offset`` columns
    partition_bytes    16 MiB    split a segment into offset ranges of about this size
    start_offset       start     batch reads: first offset (an event boundary)
    end_offset         length    batch reads: stop before this offset (event boundary)
    starting_offsets   earliest  streaming: ``earliest``, ``latest`` or JSON
                                 ``{"segment": offset}``
    max_bytes_per_     none      streaming: bytes per micro-batch (snapped to events, at
    trigger                      least one event per segment with data)
    recordFormat       none      with ``output=records``: decode each event as a record
                                 of this format (``kafka``, ``events``, ``databus``)
    ================== ========= ========================================================
    """

    endpoint: str
    segments: tuple[str, ...]
    output: str
    schema_ddl: str | None
    offset_columns: bool
    partition_bytes: int
    start_offset: int | None
    end_offset: int | None
    starting_offsets: str
    max_bytes_per_trigger: int | None = None
    record_format: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        """Parse and check the options; raises :class:`OptionError`.

        Example::

            ReadOptions.parse({"endpoint": "tcp://127.0.0.1:12345", "segment": "s"})
        """
        start = _get(options, "start_offset")
        end = _get(options, "end_offset")
        big = 1 << 62
        return cls(
            endpoint=parse_endpoint(options),
            segments=parse_segments(options),
            output=_choice(options, "output", "rows", OUTPUTS),
            schema_ddl=_get(options, "schema"),
            offset_columns=_bool(options, "offset_columns", False),
            partition_bytes=_int(
                options, "partition_bytes", DEFAULT_PARTITION_BYTES, 1024, 1 << 40
            ),
            start_offset=None if start is None else _int(options, "start_offset", 0, 0, big),
            end_offset=None if end is None else _int(options, "end_offset", 0, 0, big),
            starting_offsets=(_get(options, "starting_offsets") or "earliest").strip(),
            max_bytes_per_trigger=(
                None
                if _get(options, "max_bytes_per_trigger") is None
                else _int(options, "max_bytes_per_trigger", 0, 1, 1 << 40)
            ),
            record_format=_record_format(options),
        )


def _record_format(options: Mapping[str, str]) -> str | None:
    from .. import formats  # names only: no format module is imported here

    name = _get(options, "recordFormat")
    if name is None:
        return None
    if name.strip() not in formats.names():
        known = ", ".join(formats.names())
        raise OptionError(f"option 'recordFormat' must be one of {known}, not {name!r}")
    return name.strip()


# --- identities --------------------------------------------------------------------------


def write_identity(write_id: str | None) -> uuid.UUID:
    """The UUID of a batch write: derived from ``write_id``, random without one.

    Example::

        write_identity("nightly-2024-05-01") == write_identity("nightly-2024-05-01")
    """
    if write_id is None:
        return uuid.uuid4()
    return uuid.uuid5(NAMESPACE, f"write|{write_id}")


def stream_identity(query_id: str, batch_id: int) -> uuid.UUID:
    """The UUID of one micro-batch of a streaming query (stable across restarts)."""
    return uuid.uuid5(NAMESPACE, f"stream|{query_id}|{batch_id}")


def writer_id(identity: uuid.UUID, target: str, partition: int) -> uuid.UUID:
    """The writer id of a partition: never depends on the task attempt.

    Example::

        writer_id(ident, "orders/0", 3) == writer_id(ident, "orders/0", 3)
    """
    return uuid.uuid5(NAMESPACE, f"writer|{identity}|{target}|{partition}")


def transaction_segment(identity: uuid.UUID, target: str, partition: int) -> str:
    """The transaction segment a partition of an ``atomic`` write fills, named as Pravega
    names transaction segments (``<parent>#transaction.<32 hex digits>``)."""
    txn = uuid.uuid5(NAMESPACE, f"txn|{identity}|{target}|{partition}")
    return f"{target}#transaction.{txn.hex}"


def commit_marker(scope: str) -> uuid.UUID:
    """Attribute id of a deterministic write scope's commit marker (see module docs)."""
    return uuid.uuid5(NAMESPACE, f"commit|{scope}")


def event_number(group: int, piece: int = 0) -> int:
    """The event number of piece ``piece`` of row group ``group`` (rows ``group * R ..``).

    Numbers leave gaps on purpose: the SDK never puts events with non-consecutive numbers
    into one append, so every event is an append of its own and the server's
    per-append de-duplication is exact even when two attempts of a task write at once.

    Example::

        event_number(0) == 1; event_number(1) == 2**21 + 1; event_number(1, 1) == 2**21 + 3
    """
    return (group << PIECE_BITS) + 2 * piece + 1


def group_of(number: int) -> int:
    """The row group an event number belongs to (inverse of :func:`event_number`)."""
    return (number - 1) >> PIECE_BITS
