# /metrics families for where an append's time goes (issue 19).
#
# Contract. ``stage_families(prefix)`` turns the storage's process-wide commit-stage
# histograms (storage/stages.py) into ONE Prometheus histogram family,
# ``<prefix>commit_stage_seconds`` with a ``stage`` label (handoff_in, log_write, fdatasync,
# handoff_out, apply). Read only when /metrics is scraped, from the HTTP thread: a sample
# being added meanwhile can make one scrape off by one batch, never inconsistent for long.
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..storage.stages import STAGE_NAMES, STAGES


def stage_families(prefix: str) -> Iterator[Any]:
    from prometheus_client.core import HistogramMetricFamily

    fam = HistogramMetricFamily(
        prefix + "commit_stage_seconds",
        "Time per group commit in each stage of the commit loop",
        labels=["stage"],
    )
    for stage in STAGE_NAMES:
        fam.add_metric([stage], STAGES.buckets(stage), sum_value=STAGES.sums[stage])
    yield fam
