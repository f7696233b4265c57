"""Prometheus families for the controller, built from ``Controller.stats()`` at scrape time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def controller_families(stats: dict[str, Any]) -> Iterator[Any]:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

    p = "segmentstore_controller_"
    rpcs = CounterMetricFamily(
        p + "rpcs", "Controller RPCs answered, by method and status", labels=["method", "status"]
    )
    for (method, status), n in sorted(stats["rpcs"].items()):
        rpcs.add_metric([method, status], n)
    yield rpcs
    seconds = HistogramMetricFamily(
        p + "rpc_seconds",
        "Controller RPC handling time in the server, by method",
        labels=["method"],
    )
    for method, h in sorted(stats.get("rpc_seconds", {}).items()):
        seconds.add_metric([method], h.buckets(), h.sum)
    yield seconds
    yield GaugeMetricFamily(p + "scopes", "Scopes", value=stats["scopes"])
    yield GaugeMetricFamily(p + "streams", "Streams", value=stats["streams"])
    per = GaugeMetricFamily(
        p + "stream_segments", "Active segments per open stream", labels=["stream"]
    )
    for stream, n in sorted(stats["segments_per_stream"].items()):
        per.add_metric([stream], n)
    yield per
    yield CounterMetricFamily(p + "scale_events", "Scales done", value=stats["scale_events"])
    yield GaugeMetricFamily(
        p + "open_transactions", "Transactions open", value=stats["open_transactions"]
    )
    for name in ("committed_transactions", "aborted_transactions", "retention_truncations"):
        yield CounterMetricFamily(p + name, name.replace("_", " ").capitalize(), value=stats[name])
