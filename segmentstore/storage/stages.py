# Where one group commit's time goes (issue 19): a histogram per stage of the commit loop.
#
# Contract. ``STAGES`` is process-wide (like a Prometheus default registry): every container's
# commit loop adds one sample per stage per batch, from the event loop only, with no lock.
# Stages, in order, for one batch (seconds):
#   handoff_in   submitted to the log thread -> the log thread starts on it
#   log_write    the write() syscalls of the batch (~0 in fsync mode "always", see below)
#   fdatasync    the fdatasync (0 when the fsync mode does not sync this batch); in mode
#                "always" the write and the sync are one pwritev(RWF_DSYNC), counted here
#   handoff_out  the log thread returns -> the commit loop runs again (a GIL / loop wait)
#   apply        making the batch visible and completing its futures
# The server exposes them in /metrics as segmentstore_commit_stage_seconds{stage=...}; the
# same buckets as the append latency histogram. Recording costs a few list updates per batch.
from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Sequence

STAGE_NAMES = ("handoff_in", "log_write", "fdatasync", "handoff_out", "apply")
BOUNDS = (
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
    0.05, 0.1, 0.25, 1.0,
)  # fmt: skip


class StageTimes:
    """One fixed-bucket histogram per stage: counts[stage][bucket], plus count and sum."""

    __slots__ = ("counts", "sums", "totals")

    def __init__(self) -> None:
        self.counts = {s: [0] * (len(BOUNDS) + 1) for s in STAGE_NAMES}
        self.sums = dict.fromkeys(STAGE_NAMES, 0.0)
        self.totals = dict.fromkeys(STAGE_NAMES, 0)

    def observe(self, stage: str, seconds: float) -> None:
        self.counts[stage][bisect.bisect_left(BOUNDS, seconds)] += 1
        self.sums[stage] += seconds
        self.totals[stage] += 1

    def observe_commit(
        self, handoff_out: float, handoff_in: float, log_write: float, fdatasync: float
    ) -> None:
        """``observe`` of the four stages a durable batch brings, in one call (the commit
        loop runs it before the batch's acks are made)."""
        counts, sums, totals = self.counts, self.sums, self.totals
        for stage, seconds in (
            ("handoff_out", handoff_out),
            ("handoff_in", handoff_in),
            ("log_write", log_write),
            ("fdatasync", fdatasync),
        ):
            counts[stage][bisect.bisect_left(BOUNDS, seconds)] += 1
            sums[stage] += seconds
            totals[stage] += 1

    def buckets(self, stage: str) -> list[tuple[str, float]]:
        """Cumulative (upper bound, count) pairs ending with +Inf, as Prometheus wants."""
        out, running = [], 0
        for bound, n in zip(BOUNDS, self.counts[stage], strict=False):
            running += n
            out.append((repr(float(bound)), float(running)))
        out.append(("+Inf", float(self.totals[stage])))
        return out

    def quantile(self, stage: str, q: float) -> float:
        """Upper bound of the bucket holding quantile q (inf if past the last bound)."""
        total = self.totals[stage]
        if not total:
            return 0.0
        want, running = q * total, 0
        for bound, n in zip(BOUNDS, self.counts[stage], strict=False):
            running += n
            if running >= want:
                return bound
        return float("inf")


STAGES = StageTimes()


def timed_write(
    write: Callable[[Sequence[bytes | bytearray], int], float],
    parts: Sequence[bytes | bytearray],
    first_seq: int,
    submitted: float,
) -> tuple[float, float, float, float]:
    """Run in the log thread: ``write`` timed. Returns (sync_s, handoff_in_s, write_s, done_at)."""
    start = time.perf_counter()
    sync_s = write(parts, first_seq)
    done = time.perf_counter()
    return sync_s, start - submitted, done - start - sync_s, done
