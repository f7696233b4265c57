"""The controller's pure rules, without a server: names and ids, epochs and successors,
stream cuts, JSON round trips, the auto-scaling decision and the retention choice."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest

from segmentstore.config import ConfigError, load_config
from segmentstore.controller.autoscale import decide
from segmentstore.controller.model import (
    EpochRecord,
    RetentionCut,
    SegmentRecord,
    StreamConfig,
    StreamRecord,
    covers_key_space,
    even_ranges,
    segment_name,
    to_signed64,
    txn_suffix,
    valid_name,
)
from segmentstore.controller.retention import NO_MAX, choose_cut, cut_due


def _stream(n: int, cfg: StreamConfig | None = None, t: int = 0) -> StreamRecord:
    rec = StreamRecord("sc", "st", cfg or StreamConfig(min_segments=n), t)
    rec.epochs.append(EpochRecord(0, t, list(range(n))))
    for i, (lo, hi) in enumerate(even_ranges(n)):
        rec.segments[i] = SegmentRecord(i, lo, hi, t)
    rec.next_number = n
    return rec


def test_names_follow_pravega() -> None:
    assert valid_name("a-b.C9") and not valid_name("") and not valid_name("a/b")
    assert not valid_name("a_b") and not valid_name("x" * 256) and valid_name("x" * 255)
    assert segment_name("sc", "st", (3 << 32) | 7) == "sc/st/7.#epoch.3"
    assert txn_suffix(-1, 1) == "#transaction." + "f" * 16 + "0" * 15 + "1"
    assert to_signed64(1 << 63) == -(1 << 63) and to_signed64(5) == 5


def test_even_ranges_tile_the_key_space() -> None:
    for n in (1, 3, 7, 1000):
        r = even_ranges(n)
        assert len(r) == n and r[-1][1] == 1.0 and covers_key_space(r)
    assert not covers_key_space([(0.0, 0.5)])
    assert not covers_key_space([(0.0, 0.6), (0.5, 1.0)])


def test_successors_predecessors_and_cuts() -> None:
    rec = _stream(2)  # 0: [0, .5), 1: [.5, 1)
    rec.new_epoch([0], [(0.0, 0.25), (0.25, 0.5)], 10)  # epoch 1: ids 1<<32|2, 1<<32|3
    a, b = (1 << 32) | 2, (1 << 32) | 3
    rec.new_epoch([b, 1], [(0.25, 1.0)], 20)  # epoch 2: id 2<<32|4
    c = (2 << 32) | 4
    assert rec.current.segments == [a, c]
    assert rec.successors(0) == {a: [0], b: [0]}
    assert rec.successors(1) == {c: [b, 1]}
    assert rec.successors(a) == {}  # still active
    assert rec.valid_cut({a: 0, b: 5, 1: 0}) and not rec.valid_cut({a: 0, 1: 0})
    assert rec.before_cut(0, {a: 0, b: 0, 1: 0}) and not rec.before_cut(1, {a: 0, b: 0, 1: 0})
    assert rec.after_cut(c, {a: 0, b: 0, 1: 0}) and not rec.after_cut(a, {a: 0, b: 0, 1: 0})
    assert rec.epoch_at(15).epoch == 1 and rec.epoch_at(0).epoch == 0
    rec.head = {a: 3, b: 0, 1: 7}
    rec.cuts = [RetentionCut(5, 10, {0: 1, 1: 2})]
    rec.pending = {"op": "seal", "segments": [a]}
    rec.config = StreamConfig(2, 100, 3, 2, 2, 1000, 5000, ["t1"])
    again = StreamRecord.from_json(rec.to_json())
    assert again == rec and again.successors(1) == {c: [b, 1]}
    # Every field of every record is written (to_json is built by hand, not by asdict).
    assert json.loads(rec.to_json()).keys() == {f.name for f in fields(StreamRecord)}


def test_autoscale_decision() -> None:
    cfg = StreamConfig(scale_type=2, target_rate=100, scale_factor=3, min_segments=2)
    rec = _stream(2, cfg)
    assert decide(rec, {0: 150.0, 1: 80.0}, now=10_000, cooldown_ms=5_000) == (
        [0],
        even_ranges(3, 0.0, 0.5),
    )
    assert decide(rec, {0: 150.0}, now=1_000, cooldown_ms=5_000) is None  # too young
    assert decide(rec, {0: 10.0, 1: 10.0}, now=10_000, cooldown_ms=5_000) is None  # at minimum
    rec.config.min_segments = 1
    assert decide(rec, {0: 10.0, 1: 10.0}, now=10_000, cooldown_ms=5_000) == ([0, 1], [(0.0, 1.0)])
    assert decide(rec, {0: 10.0, 1: 60.0}, now=10_000, cooldown_ms=5_000) is None  # one is warm
    rec.config.scale_type = 0
    assert decide(rec, {0: 1e9, 1: 0.0}, now=10_000, cooldown_ms=0) is None  # fixed policy


def test_retention_choice() -> None:
    rec = _stream(1, StreamConfig(retention_type=2, retention_param=100))
    rec.cuts = [
        RetentionCut(1000, 0, {0: 0}),
        RetentionCut(2000, 150, {0: 150}),
        RetentionCut(3000, 300, {0: 300}),
    ]
    assert choose_cut(rec, now=4000, total=300) == rec.cuts[1]  # keeps 150 >= 100
    assert choose_cut(rec, now=4000, total=120) == rec.cuts[0]
    rec.config.retention_type, rec.config.retention_param = 1, 1500
    assert choose_cut(rec, now=4000, total=300) == rec.cuts[1]  # taken at or before 2500
    assert choose_cut(rec, now=2000, total=300) is None
    rec.config.retention_type = 0
    assert choose_cut(rec, now=10**9, total=10**9) is None


def test_retention_cut_due_tightens_with_a_maximum() -> None:
    rec = _stream(1, StreamConfig(retention_type=2, retention_param=100, retention_max=NO_MAX))
    assert cut_due(rec, now=0, total=0, interval_ms=60_000)  # no cut yet
    rec.cuts = [RetentionCut(1000, 500, {0: 500})]
    assert not cut_due(rec, now=2000, total=10**9, interval_ms=60_000)  # no max: by interval
    assert cut_due(rec, now=61_000, total=500, interval_ms=60_000)
    rec.config.retention_max = 300  # SIZE: a cut once more than (300 - 100) / 2 is written
    assert not cut_due(rec, now=2000, total=600, interval_ms=60_000)
    assert cut_due(rec, now=2000, total=601, interval_ms=60_000)
    rec.config.retention_type, rec.config.retention_param, rec.config.retention_max = 1, 1000, 3000
    assert not cut_due(rec, now=1999, total=500, interval_ms=60_000)  # TIME: every 1000 ms
    assert cut_due(rec, now=2000, total=500, interval_ms=60_000)
    rec.config.retention_max = 0  # 0: no maximum (the SDK's default)
    assert not cut_due(rec, now=50_000, total=10**9, interval_ms=60_000)


def test_controller_settings(tmp_path: Path) -> None:
    assert load_config({}, environ={}).controller_port == 9090
    toml = tmp_path / "s.toml"
    toml.write_text("controller_port = 9191\n")
    assert load_config({}, environ={}, toml_path=toml).controller_port == 9191
    env = {"SEGMENTSTORE_CONTROLLER_PORT": "9292"}
    assert load_config({}, environ=env, toml_path=toml).controller_port == 9292
    assert load_config({}, environ={"SEGMENTSTORE_CONTROLLER_PORT": "-1"}).controller_port == -1
    assert load_config({"controller_port": 0}, environ={}).controller_port == 0
    with pytest.raises(ConfigError, match="controller port"):
        load_config({"controller_port": -2}, environ={})
    with pytest.raises(ConfigError, match="rate window"):
        load_config({}, environ={"SEGMENTSTORE_CONTROLLER_RATE_WINDOW_S": "0"})
