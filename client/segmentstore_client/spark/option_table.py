"""The one table of the ``segmentstore`` data source's options, and the lookup rules.

Contract: every option the data source reads is a row of :data:`OPTIONS` (canonical
camelCase name, snake_case aliases, where it applies, default and one line of docs);
:func:`normalize` maps what Spark hands over (keys lowercased by Spark, any spelling of a
known option) to canonical names, and rejects an unknown key with the list of known ones,
so that a typo such as ``atomc`` fails the query instead of silently dropping a
guarantee. Adding an option is adding a row here and reading it in ``options.py``; the
README's table is generated from these rows by :func:`markdown_table`.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

READ: Final = "read"
WRITE: Final = "write"
BOTH: Final = frozenset({READ, WRITE})


class OptionError(ValueError):
    """A data source option is unknown, missing, or has a value it cannot take."""


@dataclass(frozen=True, slots=True)
class Option:
    """One known option: canonical name, aliases, where it applies, default, docs."""

    name: str
    applies: frozenset[str]
    default: str
    doc: str
    aliases: tuple[str, ...] = ()


def _o(name: str, applies: str, default: str, doc: str, *aliases: str) -> Option:
    where = BOTH if applies == "both" else frozenset({applies})
    return Option(name, where, default, doc, aliases)


OPTIONS: Final[tuple[Option, ...]] = (
    _o("endpoint", "both", "required", "`tcp://host:port` (or `tls://`) of the segment store"),
    _o("segment", "both", "required", "the segment (or give `segments`)", "path"),
    _o(
        "segments",
        "both",
        "-",
        "comma-separated segments; a write sends partition p to `segments[p % n]`",
    ),
    _o(
        "stream",
        "both",
        "-",
        "`scope/stream`: a whole stream instead of segments (through the controller); "
        "writes are one controller transaction per task attempt, committed by the driver",
    ),
    _o(
        "controller",
        "both",
        "endpoint's host, port 9090",
        "`tcp://host:port` of the controller (streams; fetching delegation tokens)",
    ),
    _o(
        "routingKeyColumn",
        "write",
        "none",
        "stream writes: a string or binary column whose value routes each row as the "
        "official clients route a routing key (binary as Latin-1); null keys spread",
        "routing_key_column",
    ),
    _o(
        "startStreamCut",
        "read",
        "head",
        "stream batch reads: the stream cut (JSON of `StreamCut.to_json()`) to start at",
        "start_stream_cut",
    ),
    _o(
        "endStreamCut",
        "read",
        "tail",
        "stream batch reads: the stream cut to stop at (default: the tail at planning)",
        "end_stream_cut",
    ),
    _o(
        "credentials",
        "both",
        "none",
        "`user:password`, or a static token (no colon): the SDK's `credentials=`, for "
        "every driver and executor connection (add `credentials` to "
        "`spark.redaction.regex` to keep it out of plans and logs)",
    ),
    _o("tlsCaFile", "both", "system", "CA bundle (PEM) a `tls://` endpoint is checked against"),
    _o(
        "tlsVerify",
        "both",
        "true",
        "`false` skips certificate and host name checks (Pravega's disable_cert_verification)",
    ),
    _o("tlsCertFile", "both", "none", "client certificate (PEM) for mutual TLS"),
    _o("tlsKeyFile", "both", "none", "the client certificate's key (PEM)"),
    _o(
        "timeout",
        "both",
        "60",
        "seconds: bounds every call to the store from the driver and the executors "
        "(a request's reply, reconnecting after a lost connection, a task's wait for "
        "its events to become durable)",
    ),
    _o(
        "connectTimeout",
        "both",
        "5",
        "seconds: opening a connection, retries of a refused one included",
        "connect_timeout",
    ),
    _o(
        "writeId",
        "write",
        "random",
        "application id of the write; with the same id a repeated write is skipped",
        "write_id",
        "txnAppId",
    ),
    _o(
        "writeVersion",
        "write",
        "-",
        "integer version within `writeId` (Delta's txnVersion): a version at or below "
        "the committed one is skipped, a higher one is written",
        "write_version",
        "txnVersion",
    ),
    _o(
        "atomic",
        "write",
        "false",
        "stage partitions in transaction segments, merged only on commit (all or nothing)",
    ),
    _o(
        "saveMode",
        "write",
        "append",
        "`errorifexists` (fail if a target holds data) or `ignore` (then write nothing): "
        "Spark 4 refuses these as `.mode(...)` for Python sources, so give them here",
    ),
    _o("encoding", "write", "arrow", "`arrow` (Arrow IPC per event) or `msgpack`"),
    _o(
        "recordFormat",
        "both",
        "none",
        "one exact record per event in this format (`kafka`, `events`, `databus`, "
        "`records`): a write stores each row's `key, value, timestamp, headers` as one "
        "record (`rowsPerEvent` is then 1); a read with `output=records` decodes them",
        "record_format",
    ),
    _o(
        "rowsPerEvent",
        "write",
        "10000",
        "rows per event (fixed, so event numbers follow row positions)",
        "rows_per_event",
    ),
    _o(
        "maxEventBytes",
        "write",
        "4194304",
        "events above this are split in halves, deterministically",
        "max_event_bytes",
    ),
    _o(
        "compression",
        "write",
        "zstd (arrow), none (msgpack)",
        "`none`, `lz4` or `zstd`",
    ),
    _o("create", "write", "true", "create missing target segments"),
    _o(
        "output",
        "read",
        "rows",
        "`rows` (the records' columns), `raw` (one row per event) or `records`",
    ),
    _o("schema", "read", "inferred", "DDL of the rows (or `spark.read.schema(...)`)"),
    _o(
        "columns",
        "read",
        "all",
        "comma-separated columns to read (column pruning: Spark 4 gives Python sources "
        "no pruning callback)",
    ),
    _o(
        "filterPushdown",
        "read",
        "false",
        "push `_segment`/`_offset` filters into the read (needs "
        "`spark.sql.python.filterPushdown.enabled=true`, which Spark requires of any source "
        "implementing pushdown)",
    ),
    _o(
        "offsetColumns",
        "read",
        "false",
        "add `_segment` and `_offset` (the event's offset) columns",
        "offset_columns",
    ),
    _o(
        "partitionBytes",
        "read",
        "16777216",
        "at most this many bytes of a segment per input partition",
        "partition_bytes",
    ),
    _o(
        "minPartitions",
        "read",
        "driver's cores",
        "cut segments into at least this many input partitions when the data allows "
        "(pieces of at least 1 MiB)",
        "min_partitions",
    ),
    _o(
        "batchRows",
        "read",
        "10000",
        "hand Spark Arrow batches of at least this many rows (at most 64 MiB), joining "
        "consecutive events' rows when events hold fewer (Spark pays a cost per batch)",
        "batch_rows",
    ),
    _o("startOffset", "read", "start", "batch: first offset (an event boundary)", "start_offset"),
    _o(
        "endOffset",
        "read",
        "length",
        "batch: stop before this offset (an event boundary)",
        "end_offset",
    ),
    _o(
        "startingOffsets",
        "read",
        "earliest",
        'streaming: `earliest`, `latest` or JSON `{"segment": offset}`',
        "starting_offsets",
    ),
    _o(
        "maxBytesPerTrigger",
        "read",
        "none",
        "streaming: bytes per micro-batch (snapped to events)",
        "max_bytes_per_trigger",
    ),
)

_BY_KEY: Final[dict[str, Option]] = {
    key.lower(): opt for opt in OPTIONS for key in (opt.name, *opt.aliases)
}


def known(applies: str) -> list[str]:
    """Canonical names of the options of a read or a write, sorted."""
    return sorted(o.name for o in OPTIONS if applies in o.applies)


def normalize(
    options: Mapping[str, str], applies: str, ignore: tuple[str, ...] = ()
) -> dict[str, str]:
    """``options`` keyed by canonical name; raises :class:`OptionError` for an unknown
    key, an option of the other kind (a read option on a write), or two spellings of one
    option. Keys in ``ignore`` (lowercase) are dropped.

    Example::

        normalize({"write_id": "a", "ATOMIC": "true"}, "write")
        # {'writeId': 'a', 'atomic': 'true'}
    """
    out: dict[str, str] = {}
    spelled: dict[str, str] = {}
    for key, value in options.items():
        low = str(key).lower()
        if low in ignore:
            continue
        opt = _BY_KEY.get(low)
        if opt is None or applies not in opt.applies:
            names = known(applies)
            near = difflib.get_close_matches(low, [n.lower() for n in names], 1, 0.6)
            hint = ""
            if near:
                hint = f" (did you mean {next(n for n in names if n.lower() == near[0])!r}?)"
            kind = "a write" if applies == WRITE else "a read"
            what = "is an option of the other direction" if opt is not None else "is unknown"
            raise OptionError(
                f"option {key!r} {what} for {kind}{hint}; known options: {', '.join(names)}"
            )
        if opt.name in out:
            raise OptionError(
                f"option {opt.name!r} is given twice ({spelled[opt.name]!r}, {key!r})"
            )
        out[opt.name] = str(value)
        spelled[opt.name] = str(key)
    return out


def markdown_table() -> str:
    """The README's table of options (option, aliases, read/write, default, meaning)."""
    lines = [
        "| option | aliases | applies to | default | meaning |",
        "|---|---|---|---|---|",
    ]
    for o in OPTIONS:
        where = "read, write" if o.applies == BOTH else next(iter(o.applies))
        aliases = ", ".join(f"`{a}`" for a in o.aliases) or "-"
        lines.append(f"| `{o.name}` | {aliases} | {where} | {o.default} | {o.doc} |")
    return "\n".join(lines)
