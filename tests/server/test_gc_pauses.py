"""GcPauses in this process: its hook times collections by generation, uninstall removes
it, settle freezes what is alive (undone here, so the test process is left as it was)."""

from __future__ import annotations

import gc

from segmentstore.server.gc_pauses import GcPauses


def test_collections_are_timed_by_generation() -> None:
    pauses = GcPauses()
    pauses.install()
    pauses.install()  # once only
    try:
        gc.collect(0)
        gc.collect(1)
        gc.collect(1)
    finally:
        pauses.uninstall()
    assert [h.count for h in pauses.hists] == [1, 2, 0]
    assert all(h.sum > 0 for h in pauses.hists[:2])
    gc.collect(0)
    assert pauses.hists[0].count == 1  # uninstalled


def test_settle_freezes_what_is_alive() -> None:
    pauses = GcPauses()
    try:
        pauses.settle()
        # a frozen object may be freed (by a thread an earlier test in this worker left
        # running) between settle() and the check: the count only shrinks, by a few
        now = gc.get_freeze_count()
        assert pauses.frozen > 1000
        assert pauses.frozen - 100 <= now <= pauses.frozen
    finally:
        gc.unfreeze()
    families = {f.name: f for f in pauses.families("x_")}
    assert families["x_gc_frozen_objects"].samples[0].value == pauses.frozen
    assert {s.labels.get("generation") for s in families["x_gc_pause_seconds"].samples} == {
        "0",
        "1",
        "2",
    }
