"""Options of the ``segmentstore`` Spark data source, and the identities derived from them.

Every option is a string (Spark passes them so, keys lowercased); the known options are
the rows of :data:`~.option_table.OPTIONS`. This module parses and checks them once, on
the driver, so that a typo fails the query before any task starts.

Identities (all ``uuid5`` in :data:`NAMESPACE`, so every process derives the same ones):

* the **write identity**: from ``writeId`` (and ``writeVersion``) when given (a driver
  retry with the same ones is then the same write), else a random UUID drawn once per
  write on the driver (stable across task retries and speculative attempts, which all run
  the same pickled writer). A streaming write's identity is ``(query id, batch id)``.
* a partition's **writer id**: ``uuid5(write identity | target segment | partition id)``.
  The task attempt number never enters it: every attempt of a partition writes as the same
  writer, so the server drops what an earlier attempt already stored.
* a partition's **transaction segment** (``atomic``, overwrite):
  ``<target>#transaction.<32 hex digits>``, derived the same way plus the run id.
* the **commit marker**: a segment attribute of the target whose value is the highest
  committed sequence number of a deterministic write scope (0 for a ``writeId`` batch
  write, the ``writeVersion`` with one; the batch id for a streaming query).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from ..protocol.names import name_problem
from .codec import COMPRESSIONS, ENCODINGS
from .option_table import READ, WRITE, normalize
from .option_table import OptionError as OptionError

NAMESPACE: Final = uuid.UUID("0b6f64a4-7d0e-5c55-9a8e-2f3f1e5b7c11")
"""uuid5 namespace of every identity the Spark integration derives."""

DEFAULT_ROWS_PER_EVENT: Final = 10_000
DEFAULT_BATCH_ROWS: Final = 10_000
"""Rows per event: Spark's default Arrow batch size, so events need no re-cutting."""
MAX_ROWS_PER_EVENT: Final = 1 << 20
PIECE_BITS: Final = 21
"""Event numbers are ``(group << PIECE_BITS) + 2 * piece + 1`` (see :func:`event_number`)."""
DEFAULT_MAX_EVENT_BYTES: Final = 4 * 1024 * 1024
LIMIT_EVENT_BYTES: Final = 8 * 1024 * 1024 - 64 * 1024
DEFAULT_PARTITION_BYTES: Final = 16 * 1024 * 1024
OUTPUTS: Final = ("rows", "raw", "records")
SAVE_MODES: Final = ("append", "errorifexists", "error", "ignore")
DEFAULT_TIMEOUT: Final = 60.0
DEFAULT_CONNECT_TIMEOUT: Final = 5.0


SPARK_KEYS: Final = ("checkpointlocation",)
"""Keys Spark itself may put among a source's options (lowercase); not ours to check."""


def _get(options: Mapping[str, str], name: str) -> str | None:
    value = options.get(name)
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


def _seconds(options: Mapping[str, str], name: str, default: float) -> float:
    raw = _get(options, name)
    if raw is None:
        return default
    try:
        value = float(raw.strip())
    except ValueError:
        raise OptionError(f"option {name!r} must be a number of seconds, not {raw!r}") from None
    if not 0.1 <= value <= 86_400:
        raise OptionError(f"option {name!r} must be within 0.1..86400 seconds, not {raw!r}")
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
    """The segment names of ``segment`` (one) or ``segments`` (comma-separated), from
    canonical options (see :func:`~.option_table.normalize`).

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
    for n in names:
        problem = name_problem(n)
        if problem is not None:
            raise OptionError(f"segment name {n!r}: {problem}")
    return names


def parse_stream(options: Mapping[str, str]) -> str | None:
    """The ``stream`` option (``scope/stream``), or None; refuses it beside
    ``segment``/``segments`` with one line.

    Example::

        parse_stream({"stream": "shop/orders"})   # 'shop/orders'
    """
    raw = _get(options, "stream")
    if raw is None:
        return None
    if _get(options, "segment") is not None or _get(options, "segments") is not None:
        raise OptionError("give either 'stream' or 'segment'/'segments', not both")
    from ..streams.controller_client import split_stream

    try:
        split_stream(raw.strip())
    except ValueError as e:
        raise OptionError(f"option 'stream': {e}") from None
    return raw.strip()


def parse_targets(options: Mapping[str, str]) -> tuple[tuple[str, ...], str | None]:
    """``(segments, stream)``: the segments of ``segment``/``segments``, or ``()`` and the
    ``stream`` option's ``scope/stream``."""
    stream = parse_stream(options)
    return ((), stream) if stream is not None else (parse_segments(options), None)


def parse_endpoint(options: Mapping[str, str]) -> str:
    """The ``endpoint`` option (``tcp://host:port``), checked for shape."""
    raw = _get(options, "endpoint")
    if raw is None or not raw.strip():
        raise OptionError("option 'endpoint' (tcp://host:port) is required")
    from ..connection import Endpoint

    try:
        Endpoint.parse(raw)
    except ValueError as e:
        raise OptionError(f"option 'endpoint': {e}") from None
    return raw.strip()


@dataclass(frozen=True, slots=True)
class Timeouts:
    """How long calls to the store may take (seconds); see ``timeout`` and
    ``connectTimeout`` in :data:`~.option_table.OPTIONS`."""

    call: float = DEFAULT_TIMEOUT
    connect: float = DEFAULT_CONNECT_TIMEOUT

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> Timeouts:
        """From canonical options. Example: ``Timeouts.parse({"timeout": "5"})``"""
        call = _seconds(options, "timeout", DEFAULT_TIMEOUT)
        return cls(call, min(call, _seconds(options, "connectTimeout", DEFAULT_CONNECT_TIMEOUT)))


@dataclass(frozen=True, slots=True)
class Access:
    """How every driver and executor connection reaches the store and the controller:
    the ``controller``, ``credentials`` and ``tls*`` options (see
    :data:`~.option_table.OPTIONS`), handed to the SDK's ``connect``."""

    controller: str = ""
    credentials: tuple[str, str] | str | None = None
    tls_ca_file: str = ""
    tls_verify: bool = True
    tls_cert_file: str = ""
    tls_key_file: str = ""

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> Access:
        """From canonical options. Example: ``Access.parse({"credentials": "ann:pw"})``"""
        creds: tuple[str, str] | str | None = None
        raw = _get(options, "credentials")
        if raw is not None:
            if not raw:
                raise OptionError("option 'credentials' must not be empty")
            user, colon, password = raw.partition(":")
            creds = (user, password) if colon else raw
            if colon and not user:
                raise OptionError("option 'credentials' is 'user:password'; the user is empty")
        controller = (_get(options, "controller") or "").strip()
        if controller:
            from ..connection import Endpoint

            try:
                Endpoint.parse(controller)
            except ValueError as e:
                raise OptionError(f"option 'controller': {e}") from None
        cert, key = _get(options, "tlsCertFile") or "", _get(options, "tlsKeyFile") or ""
        if bool(cert) != bool(key):
            raise OptionError("give both 'tlsCertFile' and 'tlsKeyFile', or neither")
        for name in ("tlsCaFile", "tlsCertFile", "tlsKeyFile"):
            path = _get(options, name)
            if path and not os.path.isfile(path):
                raise OptionError(f"option {name!r}: no such file {path!r}")
        return cls(
            controller=controller,
            credentials=creds,
            tls_ca_file=_get(options, "tlsCaFile") or "",
            tls_verify=_bool(options, "tlsVerify", True),
            tls_cert_file=cert,
            tls_key_file=key,
        )


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """Parsed options of ``df.write.format("segmentstore")`` and ``writeStream``; the
    options, their aliases and defaults are the rows of
    :data:`~.option_table.OPTIONS` that apply to writes."""

    endpoint: str
    segments: tuple[str, ...]
    write_id: str | None
    atomic: bool
    encoding: str
    rows_per_event: int
    max_event_bytes: int
    compression: str
    create: bool
    timeouts: Timeouts = Timeouts()
    write_version: int | None = None
    save_mode: str = "append"
    record_format: str | None = None
    access: Access = Access()
    stream: str | None = None
    routing_key_column: str | None = None

    @property
    def timeout(self) -> float:
        """Seconds every call to the store may take (the ``timeout`` option)."""
        return self.timeouts.call

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteOptions:
        """Parse and check the options (any spelling); raises :class:`OptionError`.

        Example::

            WriteOptions.parse({"endpoint": "tcp://127.0.0.1:12345", "segment": "s"})
        """
        opts = normalize(options, WRITE, SPARK_KEYS)
        write_id = _get(opts, "writeId")
        if write_id is not None and not write_id.strip():
            raise OptionError("option 'writeId' must not be empty")
        version = (
            None
            if _get(opts, "writeVersion") is None
            else _int(opts, "writeVersion", 0, 0, (1 << 63) - 1)
        )
        if version is not None and write_id is None:
            raise OptionError("option 'writeVersion' needs 'writeId' (the application id)")
        encoding = _choice(opts, "encoding", "arrow", ENCODINGS)
        record_format = _record_format(opts)
        segments, stream = parse_targets(opts)
        key_column = _get(opts, "routingKeyColumn")
        if key_column is not None and stream is None:
            raise OptionError("option 'routingKeyColumn' needs 'stream' (segments have no keys)")
        if stream is not None and record_format is not None:
            raise OptionError("option 'recordFormat' is for segments; a stream stores rows")
        return cls(
            endpoint=parse_endpoint(opts),
            segments=segments,
            stream=stream,
            routing_key_column=None if key_column is None else key_column.strip(),
            access=Access.parse(opts),
            write_id=write_id.strip() if write_id is not None else None,
            atomic=_bool(opts, "atomic", False),
            encoding=encoding,
            rows_per_event=1
            if record_format
            else _int(opts, "rowsPerEvent", DEFAULT_ROWS_PER_EVENT, 1, MAX_ROWS_PER_EVENT),
            max_event_bytes=_int(
                opts, "maxEventBytes", DEFAULT_MAX_EVENT_BYTES, 1024, LIMIT_EVENT_BYTES
            ),
            compression=_choice(
                opts, "compression", "zstd" if encoding == "arrow" else "none", COMPRESSIONS
            ),
            create=_bool(opts, "create", True),
            timeouts=Timeouts.parse(opts),
            write_version=version,
            save_mode=_choice(opts, "saveMode", "append", SAVE_MODES).replace(
                "errorifexists", "error"
            ),
            record_format=record_format,
        )

    def target_of(self, partition: int) -> str:
        """The target segment of a partition."""
        return self.segments[partition % len(self.segments)]


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """Parsed options of ``spark.read.format("segmentstore")`` and ``readStream``; the
    options, their aliases and defaults are the rows of
    :data:`~.option_table.OPTIONS` that apply to reads."""

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
    timeouts: Timeouts = Timeouts()
    columns: tuple[str, ...] | None = None
    min_partitions: int = 1
    batch_rows: int = DEFAULT_BATCH_ROWS
    filter_pushdown: bool = False
    record_format: str | None = None
    access: Access = Access()
    stream: str | None = None
    start_cut: str | None = None
    end_cut: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        """Parse and check the options (any spelling); raises :class:`OptionError`.

        Example::

            ReadOptions.parse({"endpoint": "tcp://127.0.0.1:12345", "segment": "s"})
        """
        opts = normalize(options, READ, SPARK_KEYS)
        start = _get(opts, "startOffset")
        end = _get(opts, "endOffset")
        big = 1 << 62
        cols = _get(opts, "columns")
        columns = None if cols is None else tuple(c.strip() for c in cols.split(",") if c.strip())
        if columns is not None and not columns:
            raise OptionError("option 'columns' names no column")
        segments, stream = parse_targets(opts)
        cuts = {n: _get(opts, n) for n in ("startStreamCut", "endStreamCut")}
        for name, cut in cuts.items():
            if cut is not None and stream is None:
                raise OptionError(f"option {name!r} needs 'stream'")
            if cut is not None:
                _check_cut(name, cut, stream)
        if stream is not None and (start is not None or end is not None):
            raise OptionError("startOffset/endOffset are for segments; a stream takes stream cuts")
        return cls(
            endpoint=parse_endpoint(opts),
            segments=segments,
            stream=stream,
            start_cut=cuts["startStreamCut"],
            end_cut=cuts["endStreamCut"],
            access=Access.parse(opts),
            output=_choice(opts, "output", "rows", OUTPUTS),
            schema_ddl=_get(opts, "schema"),
            offset_columns=_bool(opts, "offsetColumns", False),
            partition_bytes=_int(opts, "partitionBytes", DEFAULT_PARTITION_BYTES, 1024, 1 << 40),
            start_offset=None if start is None else _int(opts, "startOffset", 0, 0, big),
            end_offset=None if end is None else _int(opts, "endOffset", 0, 0, big),
            starting_offsets=(_get(opts, "startingOffsets") or "earliest").strip(),
            max_bytes_per_trigger=(
                None
                if _get(opts, "maxBytesPerTrigger") is None
                else _int(opts, "maxBytesPerTrigger", 0, 1, 1 << 40)
            ),
            timeouts=Timeouts.parse(opts),
            columns=columns,
            min_partitions=_int(opts, "minPartitions", os.cpu_count() or 1, 1, 100_000),
            filter_pushdown=_bool(opts, "filterPushdown", False),
            record_format=_record_format(opts),
            batch_rows=_int(opts, "batchRows", DEFAULT_BATCH_ROWS, 1, 1 << 24),
        )


def _check_cut(name: str, text: str, stream: str | None) -> None:
    from ..streams.stream_cut import StreamCut

    try:
        cut = StreamCut.from_json(text)
    except ValueError as e:
        raise OptionError(f"option {name!r}: {e}") from None
    if cut.stream != stream:
        raise OptionError(f"option {name!r} is a cut of {cut.stream!r}, not of {stream!r}")


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


def write_identity(write_id: str | None, version: int | None = None) -> uuid.UUID:
    """The UUID of a batch write: derived from ``writeId`` (and ``writeVersion``), random
    without one.

    Example::

        write_identity("nightly") == write_identity("nightly")
        write_identity("nightly", 7) != write_identity("nightly", 8)
    """
    if write_id is None:
        return uuid.uuid4()
    if version is None:
        return uuid.uuid5(NAMESPACE, f"write|{write_id}")
    return uuid.uuid5(NAMESPACE, f"write|{write_id}|v{version}")


def marker_of(write_id: str | None, version: int | None, identity: uuid.UUID) -> tuple[str, int]:
    """The commit marker scope and sequence number of a batch write: with a
    ``writeVersion`` the application's scope (``app|<writeId>``) at that version, so a
    version at or below the committed one is skipped and a higher one written (Delta's
    ``txnAppId``/``txnVersion``); otherwise the write's own scope at 0."""
    if write_id is not None and version is not None:
        return f"app|{write_id}", version
    return f"write|{identity}", 0


def stream_identity(query_id: str, batch_id: int) -> uuid.UUID:
    """The UUID of one micro-batch of a streaming query (stable across restarts)."""
    return uuid.uuid5(NAMESPACE, f"stream|{query_id}|{batch_id}")


def writer_id(identity: uuid.UUID, target: str, partition: int) -> uuid.UUID:
    """The writer id of a partition: never depends on the task attempt.

    Example::

        writer_id(ident, "orders/0", 3) == writer_id(ident, "orders/0", 3)
    """
    return uuid.uuid5(NAMESPACE, f"writer|{identity}|{target}|{partition}")


def transaction_segment(identity: uuid.UUID, run: uuid.UUID, target: str, partition: int) -> str:
    """The transaction segment a partition of a staged (``atomic`` or overwrite) write
    fills, named as Pravega names transaction segments
    (``<parent>#transaction.<32 hex digits>``). ``run`` is drawn once per run of the
    write on the driver, so the attempts of one run share it and a new run of the same
    write never reuses what an aborted run's stray attempt might still touch."""
    txn = uuid.uuid5(NAMESPACE, f"txn|{identity}|{run}|{target}|{partition}")
    return f"{target}#transaction.{txn.hex}"


def fence_attribute(run: uuid.UUID) -> uuid.UUID:
    """Attribute id set on the targets when a run of a write is aborted: an attempt of
    that run that sees it stops (and removes the transaction segment it created)."""
    return uuid.uuid5(NAMESPACE, f"fence|{run}")


def fingerprint_attribute(kind: str, scope: str, seq: int) -> uuid.UUID:
    """Attribute id of a committed write's fingerprint (``rows`` or ``schema``), which a
    repeated ``writeId`` (and version) is compared against."""
    return uuid.uuid5(NAMESPACE, f"{kind}|{scope}|{seq}")


BASE_ATTRIBUTE: Final = uuid.uuid5(NAMESPACE, "overwrite-base")
"""Attribute of a target: the offset where its current contents start (an overwrite sets
it atomically with merging the new contents, then truncates there). Readers start at
``max(start offset, base)``."""


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
