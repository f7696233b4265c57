# The cyclic garbage collector's pauses on the append path (issue 19, round 4).
#
# Contract. ``GcPauses.install()`` registers a ``gc.callbacks`` hook that times every
# collection by generation into three histograms (exported in /metrics as
# ``<prefix>gc_pause_seconds{generation=...}``), and ``settle()``, called once the server
# has started (recovery done, listeners open), collects what startup left and moves every
# object alive then into the permanent generation (``gc.freeze``): modules, functions,
# config and the recovered metadata are never traversed again, so a full collection costs
# what the running server allocated since, not everything the process ever imported (a
# full collection of a freshly started server took ~35-40 ms of CPU, measured with this
# hook). Frozen objects still die by reference counting; only cycles among them are never
# collected, which startup objects do not form in any number that matters.
#
# A collection runs with the GIL held, in whichever thread allocated: the hook does a few
# arithmetic operations and is never re-entered (collections do not nest). ``uninstall``
# removes the hook (tests, a server stopped in a process that goes on).
from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from typing import Any

from .metrics import LATENCY_BUCKETS, Histogram

GC_BUCKETS = (0.00005, *LATENCY_BUCKETS)  # a young collection takes tens of microseconds


class GcPauses:
    __slots__ = ("_started", "frozen", "hists")

    def __init__(self) -> None:
        self.hists = tuple(Histogram(GC_BUCKETS) for _ in range(3))
        self.frozen = 0
        self._started = 0.0

    def _hook(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.hists[info["generation"]].observe(time.perf_counter() - self._started)

    def install(self) -> None:
        if self._hook not in gc.callbacks:
            gc.callbacks.append(self._hook)

    def uninstall(self) -> None:
        while self._hook in gc.callbacks:
            gc.callbacks.remove(self._hook)

    def settle(self) -> None:
        """Collect what startup left behind, then freeze everything alive."""
        gc.collect()
        gc.freeze()
        self.frozen = gc.get_freeze_count()

    def families(self, prefix: str) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily

        fam = HistogramMetricFamily(
            prefix + "gc_pause_seconds",
            "Pauses of the cyclic garbage collector, by generation (GIL held throughout)",
            labels=["generation"],
        )
        for gen, hist in enumerate(self.hists):
            fam.add_metric([str(gen)], hist.buckets(), sum_value=hist.sum)
        yield fam
        yield GaugeMetricFamily(
            prefix + "gc_frozen_objects",
            "Objects moved out of the collector's reach after startup (gc.freeze)",
            value=self.frozen,
        )
