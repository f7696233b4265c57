"""Issue 19, round 7: ``bench_sync_sizes.py --small`` times small durable writes, the
disk's own floor under an ack's p99 at fsync=always (README "Latency, round 7")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
sys.path.insert(0, str(SCRIPTS))

from bench_sync_sizes import SMALL, quantiles_us, small_sync_latencies  # noqa: E402


def test_each_small_write_is_timed_and_lands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(tmp_path / "probe")
    written: list[tuple[int, int]] = []
    real = os.pwritev

    def spy(fd: int, buffers: list[bytes], offset: int, flags: int = 0) -> int:
        assert flags & os.RWF_DSYNC  # durable before it returns, as the log's write
        written.append((offset, sum(map(len, buffers))))
        return real(fd, buffers, offset, flags)

    monkeypatch.setattr(os, "pwritev", spy)
    xs = small_sync_latencies(path, 20, 0.0)
    assert len(xs) == 20 and all(x > 0 for x in xs)
    assert written == [(i * SMALL, SMALL) for i in range(20)]  # appended, never rewritten
    assert not os.path.exists(path)  # the probe file is removed
    line = quantiles_us(xs)
    assert "p50" in line and "p99" in line and "max" in line


def test_a_bad_count_is_one_clear_error(tmp_path: Path) -> None:
    cmd = [sys.executable, str(SCRIPTS / "bench_sync_sizes.py"), "--small", "1"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 2
    assert "--small needs at least 2 writes" in out.stderr
    assert "Traceback" not in out.stderr
