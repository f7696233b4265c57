"""Prometheus metrics, cheap enough for the append hot path.

Counters and histograms are plain Python numbers and lists updated without locks (the
event loop is single-threaded); a custom collector turns them into Prometheus families
only when ``/metrics`` is scraped. prometheus_client's own metric objects take a lock on
every ``inc()``, which costs more than the rest of an append's bookkeeping.
"""

from __future__ import annotations

import bisect
import logging
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .latency import stage_families

log = logging.getLogger("segmentstore.server")

LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
)  # fmt: skip
BATCH_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)


class Histogram:
    """Cumulative-on-export histogram with fixed upper bounds."""

    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.count += 1
        self.sum += value

    def buckets(self) -> list[tuple[str, float]]:
        out, running = [], 0
        for bound, n in zip(self.bounds, self.counts, strict=False):
            running += n
            out.append((repr(float(bound)), float(running)))
        out.append(("+Inf", float(self.count)))
        return out


class Metrics:
    """Everything the server counts. Attributes are bumped directly by the hot paths."""

    def __init__(self) -> None:
        self.appends = 0
        self.append_bytes = 0
        self.events = 0
        self.duplicate_appends = 0
        self.reads = 0
        self.read_bytes = 0
        self.connections = 0
        self.connections_total = 0
        self.protocol_errors = 0
        # Resource budgets (issue 13): refusals at the cap, closes by timeout kind.
        self.connections_refused = 0
        self.timeouts: Counter[str] = Counter()
        self.recovery_seconds = 0.0
        self.errors: Counter[str] = Counter()
        self.requests: Counter[str] = Counter()
        self.append_latency = Histogram(LATENCY_BUCKETS)
        self.fsync_latency = Histogram(LATENCY_BUCKETS)
        self.commit_batch = Histogram(BATCH_BUCKETS)
        self.store_stats: Callable[[], dict[str, float]] = dict
        self.controller_stats: Callable[[], dict[str, Any]] | None = None  # set when enabled
        self.gc_pauses: Any = None  # gc_pauses.GcPauses in a server process (run())

    def on_commit(self, records: int, fsync_seconds: float) -> None:
        self.commit_batch.observe(records)
        self.fsync_latency.observe(fsync_seconds)


class _Collector:
    def __init__(self, metrics: Metrics) -> None:
        self.m = metrics

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        m = self.m
        p = "segmentstore_"
        for name, value, doc in (
            ("appends", m.appends, "Append commands stored (blocks and conditional appends)"),
            ("appended", m.append_bytes, "Bytes appended to segments"),
            ("events", m.events, "Events appended"),
            ("duplicate_appends", m.duplicate_appends, "Resent appends dropped as duplicates"),
            ("reads", m.reads, "ReadSegment requests answered"),
            ("read", m.read_bytes, "Bytes returned by ReadSegment"),
            ("connections", m.connections_total, "Connections accepted"),
            ("protocol_errors", m.protocol_errors, "Connections closed for protocol errors"),
            ("connections_refused", m.connections_refused, "Connections refused at the cap"),
        ):
            unit = "_bytes" if name in ("appended", "read") else ""
            yield CounterMetricFamily(p + name + unit, doc, value=value)
        errors = CounterMetricFamily(p + "error_replies", "Error replies sent", labels=["reply"])
        for reply, n in sorted(m.errors.items()):
            errors.add_metric([reply], n)
        yield errors
        timeouts = CounterMetricFamily(
            p + "connection_timeouts", "Connections closed by a timeout", labels=["kind"]
        )
        for kind, n in sorted(m.timeouts.items()):
            timeouts.add_metric([kind], n)
        yield timeouts
        reqs = CounterMetricFamily(p + "requests", "Requests received", labels=["command"])
        for command, n in sorted(m.requests.items()):
            reqs.add_metric([command], n)
        yield reqs
        yield GaugeMetricFamily(p + "open_connections", "Open connections", value=m.connections)
        yield GaugeMetricFamily(
            p + "recovery_duration_seconds", "Recovery time at startup", value=m.recovery_seconds
        )
        stats = m.store_stats()
        yield GaugeMetricFamily(p + "segments", "Segments stored", value=stats.get("segments", 0))
        yield GaugeMetricFamily(
            p + "log_size_bytes", "Bytes in the write-ahead log", value=stats.get("log_bytes", 0)
        )
        yield GaugeMetricFamily(
            p + "containers_stopped",
            "Containers stopped after an internal error (their calls fail; a restart "
            "recovers them from the log)",
            value=stats.get("stopped", 0),
        )
        yield from _native_lane_families(p, stats)
        if m.controller_stats is not None:
            from ..controller.metrics import controller_families

            yield from controller_families(m.controller_stats())
        for name, hist, doc in (
            ("append_latency_seconds", m.append_latency, "Append received to acknowledged"),
            ("fsync_duration_seconds", m.fsync_latency, "Duration of one log write+fsync"),
            ("group_commit_records", m.commit_batch, "Log records made durable per fsync"),
        ):
            yield HistogramMetricFamily(p + name, doc, buckets=hist.buckets(), sum_value=hist.sum)
        yield from stage_families(p)
        if m.gc_pauses is not None:
            yield from m.gc_pauses.families(p)


class MetricsPage:
    """The Prometheus text for ``/metrics``, rendered on the event loop when scraped (the
    HTTP server itself lives in ``segmentstore.relay.http_server``)."""

    def __init__(self, metrics: Metrics) -> None:
        from prometheus_client import CollectorRegistry

        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(metrics))  # type: ignore[arg-type]

    def render(self) -> tuple[bytes, str]:
        """(body, content type)"""
        from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), str(CONTENT_TYPE_LATEST)


def _native_lane_families(p: str, stats: dict[str, float]) -> Iterator[Any]:
    """The native log write lane (``SEGMENTSTORE_NATIVE_LOG=1``): how many containers have
    one, and how many batches it made durable or handed back to the Python path."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    yield GaugeMetricFamily(
        p + "native_log_lanes",
        "Containers whose log thread has the native write lane",
        value=stats.get("native_log_lane", 0),
    )
    yield CounterMetricFamily(
        p + "native_log_batches",
        "Log batches made durable by the native write lane",
        value=stats.get("native_log_batches", 0),
    )
    yield CounterMetricFamily(
        p + "native_log_fallbacks",
        "Log batches the native lane handed back to the Python write path",
        value=stats.get("native_log_fallbacks", 0),
    )
