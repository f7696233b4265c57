"""A ``segmentstore_faulty`` format: the real data source, with injected task failures.

Options on top of the real ones:

* ``fail_partition``: the partition whose task fails (default 0);
* ``fail_after_rows``: the task fails once this many rows of it are durable;
* ``fail_attempts``: ``first`` (only attempt 0 fails; the retry succeeds) or ``all``;
* ``fail_flag``: fail only while this file exists (for streaming restarts);
* ``commit_log``: append the commit messages the driver got to this file (JSON lines);
* ``fail_hard``: (stream writes) the failing attempt's process exits at once (``os._exit``)
  instead of raising, so its transaction is left open for its lease to end.

Before raising, the failing attempt waits until the server holds the events of the rows
it handed over, so every retry really starts from a half-written partition.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Iterator
from typing import Any

from pyspark import TaskContext
from segmentstore_client.spark.datasource import (
    SegmentStoreDataSource,
    SegmentStoreWriter,
    StreamTxnWriter,
)
from segmentstore_client.spark.options import event_number, writer_id
from segmentstore_client.spark.streaming import (
    BATCH_ID_PROPERTY,
    QUERY_ID_PROPERTY,
    SegmentStoreStreamWriter,
    stream_job,
)
from segmentstore_client.spark.writer import WriteJob
from segmentstore_client.sync import connect


class InjectedFailure(RuntimeError):
    pass


def _should_fail(options: dict[str, str], partition: int, attempt: int) -> bool:
    if partition != int(options.get("fail_partition", "0")):
        return False
    flag = options.get("fail_flag")
    if flag is not None and not os.path.exists(flag):
        return False
    return options.get("fail_attempts", "first") == "all" or attempt == 0


def _failing(
    batches: Iterator[Any], options: dict[str, str], job: WriteJob, partition: int
) -> Iterator[Any]:
    limit = int(options["fail_after_rows"])
    per_event = job.options.rows_per_event
    seen = 0
    for batch in batches:
        if seen >= limit:
            _wait_durable(job, partition, limit // per_event)
            raise InjectedFailure(f"injected failure after {seen} rows")
        seen += batch.num_rows
        yield batch


def _wait_durable(job: WriteJob, partition: int, groups: int) -> None:
    opts = job.options
    target = opts.target_of(partition)
    dest = job.destination(partition)
    wid = writer_id(job.identity, target, partition)
    want = event_number(groups - 1) if groups > 0 else 0
    client = connect(opts.endpoint)
    try:
        for _ in range(600):  # up to 30 s
            last = client.last_event_number(dest, wid)
            if last is not None and last >= want:
                return
            time.sleep(0.05)
    finally:
        client.close()
    raise AssertionError(f"events up to {want} never became durable")


def _log_commits(options: dict[str, str], messages: list[Any]) -> None:
    path = options.get("commit_log")
    if path is not None:
        with open(path, "a") as f:
            for m in messages:
                f.write(json.dumps(dataclasses.asdict(m)) + "\n")


class FaultyWriter(SegmentStoreWriter):
    def __init__(self, job: WriteJob, options: dict[str, str]) -> None:
        super().__init__(job)
        self.fault_options = options

    def write(self, iterator: Iterator[Any]) -> Any:
        ctx = TaskContext.get()
        assert ctx is not None
        p = ctx.partitionId()
        if "fail_after_rows" in self.fault_options and _should_fail(
            self.fault_options, p, ctx.attemptNumber()
        ):
            iterator = _failing(iterator, self.fault_options, self.job, p)
        return super().write(iterator)

    def commit(self, messages: list[Any]) -> None:
        _log_commits(self.fault_options, messages)
        super().commit(messages)


def _failing_txn(batches: Iterator[Any], options: dict[str, str]) -> Iterator[Any]:
    limit = int(options["fail_after_rows"])
    seen = 0
    for batch in batches:
        if seen >= limit:
            if options.get("fail_hard") == "true":
                os._exit(3)  # the task's process dies: no except clause, no abort
            raise InjectedFailure(f"injected failure after {seen} rows")
        seen += batch.num_rows
        yield batch


class FaultyTxnWriter(StreamTxnWriter):
    def __init__(self, base: StreamTxnWriter, options: dict[str, str]) -> None:
        super().__init__(base.job)
        self.fault_options = options

    def write(self, iterator: Iterator[Any]) -> Any:
        ctx = TaskContext.get()
        assert ctx is not None
        if "fail_after_rows" in self.fault_options and _should_fail(
            self.fault_options, ctx.partitionId(), ctx.attemptNumber()
        ):
            iterator = _failing_txn(iterator, self.fault_options)
        return super().write(iterator)

    def commit(self, messages: list[Any]) -> None:
        _log_commits(self.fault_options, messages)
        super().commit(messages)


class FaultyStreamWriter(SegmentStoreStreamWriter):
    def __init__(self, base: SegmentStoreStreamWriter, options: dict[str, str]) -> None:
        super().__init__(base.options, base.schema_json)
        self.run = base.run
        self.fault_options = options

    def write(self, iterator: Iterator[Any]) -> Any:
        ctx = TaskContext.get()
        assert ctx is not None
        p = ctx.partitionId()
        if "fail_after_rows" in self.fault_options and _should_fail(
            self.fault_options, p, ctx.attemptNumber()
        ):
            query_id = ctx.getLocalProperty(QUERY_ID_PROPERTY)
            batch_id = int(ctx.getLocalProperty(BATCH_ID_PROPERTY))
            job = stream_job(self.options, self.schema_json, query_id, batch_id, self.run)
            iterator = _failing(iterator, self.fault_options, job, p)
        return super().write(iterator)


FAULT_KEYS = (
    "fail_partition",
    "fail_after_rows",
    "fail_attempts",
    "fail_flag",
    "commit_log",
    "fail_hard",
)


class FaultySegmentStore(SegmentStoreDataSource):
    """The real source; the fault options are taken out before it checks its options."""

    def __init__(self, options: Any) -> None:
        self.fault = {k: str(options[k]) for k in FAULT_KEYS if k in options}
        super().__init__({k: v for k, v in options.items() if k.lower() not in FAULT_KEYS})

    @classmethod
    def name(cls) -> str:
        return "segmentstore_faulty"

    def _fault_options(self) -> dict[str, str]:
        return self.fault

    def writer(self, schema: Any, overwrite: bool) -> FaultyWriter | FaultyTxnWriter:
        base = super().writer(schema, overwrite)
        if isinstance(base, StreamTxnWriter):
            return FaultyTxnWriter(base, self._fault_options())
        return FaultyWriter(base.job, self._fault_options())

    def streamWriter(self, schema: Any, overwrite: bool) -> FaultyStreamWriter:
        return FaultyStreamWriter(super().streamWriter(schema, overwrite), self._fault_options())
