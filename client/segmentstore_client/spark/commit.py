"""Committing or aborting a write on the driver (the tasks' side is :mod:`.writer`).

Contract:

* **staged** writes (``atomic``, and every overwrite): each partition filled a
  transaction segment of this run. Commit, per target: merge the partitions'
  transaction segments into the first one in partition order, then merge that one into
  the target with one ``MergeSegments`` that also compare-and-sets an attribute, so the
  new data and its switch become visible together: the commit marker (a repeated
  ``writeId`` is skipped from then on), or for an overwrite the target's base offset
  (readers start there), after which the target is truncated at the base.
* **direct** writes: the events are in the targets already; commit raises the commit
  marker when the write has a deterministic identity.
* With a marker, commit also stores the write's fingerprint (rows, schema) beside it; a
  later run whose every partition was skipped as already committed is compared with
  it, and a different row count or schema fails with :class:`WriteIdReused` instead of
  silently dropping the new data.
* Abort first **fences** the run (an attribute on every target that the run's attempts
  check, see :func:`~.writer.write_partition`), then deletes the run's transaction
  segments (staged) or reports, once the partitions' durable event numbers stop moving,
  what each partition left in its target and how to finish the write.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from ..errors import AttributeConflict, NoSuchSegment, SegmentStoreError
from ..sync import SyncClient
from .connect import open_client
from .options import (
    BASE_ATTRIBUTE,
    PIECE_BITS,
    Timeouts,
    commit_marker,
    fence_attribute,
    fingerprint_attribute,
    group_of,
    writer_id,
)
from .writer import PartitionCommit, WriteJob

log = logging.getLogger("segmentstore_client.spark")

_CAS_TRIES: Final = 20
_SETTLE_PAUSE: Final = 0.25
_SETTLE_MAX: Final = 5.0

ClientFactory = Callable[[str, Timeouts], SyncClient]


class WriteIdReused(SegmentStoreError):
    """A ``writeId`` (and version) that was already committed came back with different
    data; nothing was written."""


@dataclass
class WriteReport:
    """What a commit or an abort did, in numbers and in words (``str(report)``).

    Example::

        print(abort_write(job, messages))   # one line per partition
    """

    identity: str
    committed: bool
    partitions: int
    rows: int = 0
    events: int = 0
    bytes: int = 0
    merged: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        head = (
            f"segmentstore write {self.identity}: "
            + ("committed" if self.committed else "aborted")
            + f", {self.partitions} partition(s), {self.rows} row(s) reported, "
            f"{self.events} event(s), {self.bytes} byte(s)"
        )
        return "\n".join([head, *self.lines])


def _messages(messages: Sequence[object]) -> list[PartitionCommit | None]:
    return [m if isinstance(m, PartitionCommit) else None for m in messages]


def _raise_to(client: SyncClient, target: str, aid: uuid.UUID, value: int) -> None:
    """Raise attribute ``aid`` of ``target`` to at least ``value``."""
    for _ in range(_CAS_TRIES):
        current = client.get_attribute(target, aid)
        if current is not None and current >= value:
            return
        if client.compare_and_set_attribute(target, aid, value, current):
            return
    raise SegmentStoreError(f"could not set an attribute of {target!r} (contention)")


def _set(client: SyncClient, target: str, aid: uuid.UUID, value: int) -> None:
    for _ in range(_CAS_TRIES):
        current = client.get_attribute(target, aid)
        if current == value or client.compare_and_set_attribute(target, aid, value, current):
            return
    raise SegmentStoreError(f"could not set an attribute of {target!r} (contention)")


def schema_hash(schema_json: str) -> int:
    """A 62-bit fingerprint of a schema's JSON (stored as an attribute value)."""
    return uuid.uuid5(uuid.NAMESPACE_OID, schema_json).int & ((1 << 62) - 1)


def _check_repeat(client: SyncClient, job: WriteJob, msgs: list[PartitionCommit | None]) -> None:
    """Every partition was skipped as committed: compare with the stored fingerprint."""
    scope, seq = job.marker_scope, job.marker_seq
    assert scope is not None
    target = job.options.segments[0]
    rows = sum(m.rows for m in msgs if m is not None)
    had_rows = client.get_attribute(target, fingerprint_attribute("rows", scope, seq))
    had_schema = client.get_attribute(target, fingerprint_attribute("schema", scope, seq))
    what = _write_name(job)
    if had_rows is not None and had_rows != rows:
        raise WriteIdReused(
            f"{what} was already committed with {had_rows} row(s); this write has {rows}: "
            "nothing written (give a new writeVersion, or a new writeId, to write new data)"
        )
    if had_schema is not None and had_schema != schema_hash(job.schema_json):
        raise WriteIdReused(
            f"{what} was already committed with another schema: nothing written (give a "
            "new writeVersion, or a new writeId, to write new data)"
        )
    log.info("%s was already committed; skipped", what)


def _write_name(job: WriteJob) -> str:
    opts = job.options
    if opts.write_version is not None:
        return f"writeId {opts.write_id!r} version {opts.write_version}"
    return f"writeId {opts.write_id!r}"


def _store_fingerprint(client: SyncClient, job: WriteJob, target: str, rows: int) -> None:
    scope, seq = job.marker_scope, job.marker_seq
    if scope is None or scope.startswith("stream|"):
        return
    _set(client, target, fingerprint_attribute("rows", scope, seq), rows)
    _set(client, target, fingerprint_attribute("schema", scope, seq), schema_hash(job.schema_json))


def commit_write(
    job: WriteJob,
    messages: Sequence[object],
    client_factory: ClientFactory | None = None,
) -> WriteReport:
    """Commit a write whose tasks all succeeded (see the module docstring).

    Example::

        report = commit_write(job, messages)
        print(report)
    """
    opts = job.options
    msgs = _messages(messages)
    report = WriteReport(str(job.identity), True, len(msgs))
    for m in msgs:
        if m is not None:
            report.rows += m.rows
            report.events += m.events
            report.bytes += m.bytes
    client = (
        client_factory(opts.endpoint, opts.timeouts)
        if client_factory is not None
        else open_client(opts.endpoint, opts.timeouts, opts.access)
    )
    try:
        skipped = bool(msgs) and all(m is not None and m.skipped for m in msgs)
        if skipped and job.marker_scope is not None and not job.marker_scope.startswith("stream|"):
            _check_repeat(client, job, msgs)
        targets = sorted({opts.target_of(p) for p in range(len(msgs))})
        if job.overwrite:  # every target is replaced, also one no partition wrote to
            targets = sorted(set(opts.segments))
        if job.staged:
            for target in targets:
                client.segment_info(target)  # a missing target raises here, not as "merged"
            for target in targets:
                parts = [p for p in range(len(msgs)) if opts.target_of(p) == target]
                _commit_staged(client, job, target, parts, report)
            report.lines.append(
                f"merged {len(report.merged)} transaction segment(s) into {', '.join(targets)}"
                + (" (overwrite: the previous contents were replaced)" if job.overwrite else "")
            )
        elif job.marker_scope is not None:
            for target in targets:
                _raise_to(client, target, commit_marker(job.marker_scope), job.marker_seq)
        if not skipped:
            for target in targets:
                _store_fingerprint(client, job, target, report.rows)
    finally:
        client.close()
    log.info("%s", report)
    return report


def _commit_staged(
    client: SyncClient, job: WriteJob, target: str, parts: list[int], report: WriteReport
) -> None:
    """Merge the partitions' transaction segments of ``target`` into the first one, then
    that one into ``target`` together with its switch attribute (module docstring)."""
    present: list[str] = []
    for p in parts:
        txn = job.destination(p)
        try:
            client.segment_info(txn)
        except NoSuchSegment:
            continue  # a skipped partition, or merged by an earlier commit of this run
        present.append(txn)
    if not present:
        if job.overwrite:  # nothing new: the target's contents are replaced by nothing
            base = client.segment_info(target).length
            _set(client, target, BASE_ATTRIBUTE, base)
            client.truncate(target, base)
        return
    head = present[0]
    for txn in present[1:]:
        client.merge(head, txn)
    if job.overwrite:
        base = client.segment_info(target).length
        current = client.get_attribute(target, BASE_ATTRIBUTE)
        client.merge_with_attribute(target, head, BASE_ATTRIBUTE, base, current)
        if job.marker_scope is not None:
            _raise_to(client, target, commit_marker(job.marker_scope), job.marker_seq)
        client.truncate(target, base)
    elif job.marker_scope is not None:
        aid = commit_marker(job.marker_scope)
        current = client.get_attribute(target, aid)
        if current is not None and current >= job.marker_seq:
            client.delete(head, missing_ok=True)  # committed meanwhile by another run
            report.lines.append(f"{target}: already committed; this run's data dropped")
            return
        try:
            client.merge_with_attribute(target, head, aid, job.marker_seq, current)
        except AttributeConflict:
            client.delete(head, missing_ok=True)
            raise SegmentStoreError(
                f"{target}: another run of {_write_name(job)} committed at the same time"
            ) from None
    else:
        client.merge(target, head)
    report.merged.extend(present)


def _fence(client: SyncClient, job: WriteJob, targets: Sequence[str]) -> None:
    aid = fence_attribute(job.run)
    for target in targets:
        try:
            _raise_to(client, target, aid, 1)
        except NoSuchSegment:
            continue  # nothing can be written to a missing target


def _settled_last_numbers(client: SyncClient, job: WriteJob, partitions: int) -> list[int | None]:
    """Each partition writer's last durable event number, read until two reads in a row
    agree (bounded), so that events a stray attempt had in flight when the run was
    fenced are counted."""
    opts = job.options

    def read() -> list[int | None]:
        out: list[int | None] = []
        for p in range(partitions):
            target = opts.target_of(p)
            try:
                out.append(client.last_event_number(target, writer_id(job.identity, target, p)))
            except NoSuchSegment:
                out.append(None)
        return out

    deadline = time.monotonic() + min(_SETTLE_MAX, opts.timeout)
    last = read()
    while time.monotonic() < deadline:
        time.sleep(_SETTLE_PAUSE)
        now = read()
        if now == last:
            break
        last = now
    return last


def abort_write(
    job: WriteJob,
    messages: Sequence[object],
    client_factory: ClientFactory | None = None,
) -> WriteReport:
    """Abort a write: fence its run, then delete its transaction segments (staged), or
    report what each partition left in its target. Example::

        print(abort_write(job, messages))
    """
    opts = job.options
    msgs = _messages(messages)
    report = WriteReport(str(job.identity), False, len(msgs))
    for m in msgs:
        if m is not None:
            report.rows += m.rows
            report.events += m.events
            report.bytes += m.bytes
    client = (
        client_factory(opts.endpoint, opts.timeouts)
        if client_factory is not None
        else open_client(opts.endpoint, opts.timeouts, opts.access)
    )
    try:
        _fence(client, job, sorted({opts.target_of(p) for p in range(len(msgs))}))
        if job.staged:
            for p in range(len(msgs)):
                txn = job.destination(p)
                if client.delete(txn, missing_ok=True):
                    report.deleted.append(txn)
            report.lines.append(
                f"{'overwrite' if job.overwrite else 'atomic write'}: deleted "
                f"{len(report.deleted)} transaction segment(s) "
                f"({', '.join(report.deleted) or 'none'}); nothing of this write is visible "
                f"in {', '.join(opts.segments)}"
            )
        else:
            lasts = _settled_last_numbers(client, job, len(msgs))
            report.lines.append(
                f"non-atomic write: the targets keep what was written; {_hint(job)}"
            )
            for p, (m, last) in enumerate(zip(msgs, lasts, strict=True)):
                target = opts.target_of(p)
                wid = writer_id(job.identity, target, p)
                report.lines.append(_left_behind(p, target, wid, last, m, opts.rows_per_event))
    finally:
        client.close()
    log.warning("%s", report)
    return report


def _hint(job: WriteJob) -> str:
    opts = job.options
    if job.marker_scope is not None and job.marker_scope.startswith("stream|"):
        return (
            "restart the query from its checkpoint: it replays this micro-batch with "
            "the same identity and completes it without duplicates"
        )
    if opts.write_id is not None:
        version = (
            "" if opts.write_version is None else f".option('writeVersion', {opts.write_version}) "
        )
        return (
            f"run the write again with .option('writeId', {opts.write_id!r}) {version}to "
            "finish it without duplicates"
        )
    return (
        "the write had no writeId, so a new run writes everything again; give "
        ".option('writeId', ...) to make retries resume"
    )


def _left_behind(
    partition: int,
    target: str,
    wid: uuid.UUID,
    last: int | None,
    msg: PartitionCommit | None,
    rows_per_event: int,
) -> str:
    where = f"partition {partition} -> {target} (writer {wid})"
    if msg is not None:
        if msg.skipped:
            return f"{where}: already committed earlier; nothing written"
        return (
            f"{where}: complete, {msg.rows} row(s) in events up to number {msg.last_event_number}"
        )
    if last is None or last < 1:
        return f"{where}: nothing written"
    group = group_of(last)
    piece = ((last - 1) & ((1 << PIECE_BITS) - 1)) // 2
    rows = (group + 1) * rows_per_event
    return (
        f"{where}: incomplete; events up to number {last} (row group {group}, piece {piece}) "
        f"are durable: rows 0..{rows - 1}, fewer if that group was split into pieces"
    )
