"""Where an append's time goes (issue 19): /metrics shows a per-stage histogram of the
commit loop, one sample per group commit in every stage, and in fsync=always mode the
fdatasync stage has real time in it."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from segmentstore_client.protocol import block_end, frame_events

from segmentstore.storage.stages import BOUNDS, STAGE_NAMES, StageTimes

from .test_metrics import scrape
from .wire import WireClient, next_id, unique

if TYPE_CHECKING:
    from conftest import ServerProcess  # tests/conftest.py


def test_observe_commit_is_the_four_observes() -> None:
    one, four = StageTimes(), StageTimes()
    for sample in ((0.00003, 0.0001, 0.000002, 0.0002), (0.002, 0.00001, 0.0, 7.0)):
        one.observe_commit(*sample)
        for stage, v in zip(
            ("handoff_out", "handoff_in", "log_write", "fdatasync"), sample, strict=True
        ):
            four.observe(stage, v)
    for stage in STAGE_NAMES:
        assert one.buckets(stage) == four.buckets(stage)
        assert one.sums[stage] == four.sums[stage]


def test_stage_histogram_buckets_and_quantiles() -> None:
    st = StageTimes()
    for v in (0.00002, 0.0003, 0.0003, 0.004, 5.0):
        st.observe("fdatasync", v)
    b = dict(st.buckets("fdatasync"))
    assert b["+Inf"] == 5 and b[repr(BOUNDS[-1])] == 4
    assert b[repr(0.000025)] == 1 and b[repr(0.0005)] == 3
    assert st.quantile("fdatasync", 0.5) == 0.0005
    assert st.quantile("fdatasync", 0.99) == float("inf")
    assert st.quantile("apply", 0.5) == 0.0
    assert abs(st.sums["fdatasync"] - 5.00462) < 1e-9


async def test_commit_stages_in_metrics(server: ServerProcess) -> None:
    async with await WireClient.connect(server.host, server.port) as c:
        before = await scrape(server.http_port)
        name = unique()
        await c.create_segment(name)
        w = uuid.uuid4()
        await c.setup_append(w, name)
        for b in range(20):  # one at a time: at least 20 group commits
            c.send(block_end(w, frame_events([b"x" * 100]), 1, b + 1, next_id()))
            await c.wait_acked(w, b + 1)
        m = await scrape(server.http_port)

    def count(stage: str, metrics: dict[str, float]) -> float:
        return metrics.get(f'segmentstore_commit_stage_seconds_count{{stage="{stage}"}}', 0.0)

    grown = {s: count(s, m) - count(s, before) for s in STAGE_NAMES}
    # Every awaited append is its own batch: >= 20 more commits (create_segment adds some).
    assert grown["fdatasync"] >= 20, grown
    # The four stages of one log write are recorded together, once per batch.
    assert grown["handoff_in"] == grown["log_write"] == grown["fdatasync"] == grown["handoff_out"]
    fsync_sum = m['segmentstore_commit_stage_seconds_sum{stage="fdatasync"}']
    assert fsync_sum > 0  # fsync=always: every batch was synced
    inf = m['segmentstore_commit_stage_seconds_bucket{le="+Inf",stage="apply"}']
    assert inf == m['segmentstore_commit_stage_seconds_count{stage="apply"}'] >= 20
