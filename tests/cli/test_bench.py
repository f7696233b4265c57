"""``segmentstore bench`` against a real server: figures, chart, PNG, clean-up."""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import CliRunner


def test_bench_reports_rates_and_percentiles(cli: CliRunner, tmp_path: Path) -> None:
    r = cli("bench", "--events", "3000", "--size", "64", "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["events"] == 3000 and res["size"] == 64
    assert res["write_events_per_s"] > 0 and res["read_mb_per_s"] > 0
    ack = res["ack_ms"]
    assert 0 < ack["p50"] <= ack["p90"] <= ack["p99"] <= ack["p99.9"] <= ack["max"]
    assert cli("segment", "info", res["segment"]).returncode == 4  # the scratch segment is gone

    png = tmp_path / "lat.png"
    kept = "cli/bench-kept/0"
    r = cli(
        "bench",
        "--events",
        "500",
        "--rate",
        "5000",
        "--chart",
        "--png",
        str(png),
        "--segment",
        kept,
        "--keep",
    )
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    assert "EVENTS/S" in out and "P99.9" in out and "ack latency (ms)" in out and "█" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    info = json.loads(cli("segment", "info", kept, "--json").stdout)
    assert info["events"] == 500 and info["length"] == 500 * (8 + 100)
    r = cli("bench", "--events", "10", "--segment", kept)  # refuses to mix with old data
    assert r.returncode == 2 and b"is not empty" in r.stderr
    assert cli("bench", "--events", "0").returncode == 2
