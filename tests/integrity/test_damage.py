"""Damage at rest, table-driven: each kind of damage to each kind of file (issue 13).

One pristine data directory is built per module: segments and a table written and closed
(a checkpoint, chunk files with block checksums), then more appends left only in the log
(the copy taken before close is what a kill -9 leaves). Each case damages a copy and checks
that the outcome is one of

* ``recovered``: the store opens and every acknowledged append reads back;
* ``refused``: a real ``segmentstore serve`` exits with code 3 and one stderr line naming
  the damaged file (no traceback), and the directory is left exactly as it was;
* ``reads fail``: ``serve`` starts, and the damaged segment's reads fail with
  SegmentDamaged naming the chunk file while every other segment reads back exactly.

Never wrong bytes, never acknowledged data deleted. ``segmentstore check`` reports every
damage (exit 1) and passes the pristine and the torn-tail directories (exit 0).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from segmentstore import cli
from segmentstore.storage import SegmentDamaged, SegmentStore, StoreConfig
from segmentstore.tables import TableStore

STREAMS = ["stream/a", "stream/b"]
TABLE = "scope/_tables/t"
POST = 10  # appends to stream/a after the checkpoint (only in the log)


def _config(data_dir: Path) -> StoreConfig:
    # Default chunk file size: the one ``segmentstore serve`` uses (store.json records it).
    # Small log files and checkpoints: the oldest log files are retired, so the checkpoint
    # is the only record of what they held.
    return StoreConfig(
        data_dir,
        log_file_bytes=64 * 1024,
        checkpoint_log_bytes=128 * 1024,
        flush_bytes=64 * 1024,
        flush_interval_s=0.05,
    )


def _post(i: int) -> bytes:
    return f"post-{i:04d};".encode() * 20


async def _build(data_dir: Path, crash: Path) -> dict[str, bytes]:
    expected = {name: b"" for name in STREAMS}
    async with await SegmentStore.open(_config(data_dir)) as s:
        for n, name in enumerate(STREAMS):
            await s.create_segment(name)
            for i in range(30):
                payload = f"{name}:{i:04d};".encode() * (1 + (i * 37 + n) % 500)
                await s.append(name, payload)
                expected[name] += payload
        tables = await TableStore.open(s)
        await tables.create(TABLE)
        for i in range(50):
            await tables.update(TABLE, [(f"key-{i}".encode(), b"v" * 300, -(2**63))])
        await tables.close()
        await asyncio.sleep(0.2)  # let the checkpointer retire log files
    assert not (_cdir(data_dir) / "log" / f"{0:016d}.log").exists()
    async with await SegmentStore.open(_config(data_dir)) as s:
        for i in range(POST):
            await s.append(STREAMS[0], _post(i))
            expected[STREAMS[0]] += _post(i)
        # Let the flush timer copy the new bytes into the chunk files past the checkpoint's
        # lengths, so a refused start has chunk bytes it could cut (it must not).
        await asyncio.sleep(0.3)
        shutil.copytree(data_dir, crash)  # the disk as a kill -9 now would leave it
    return expected


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes]]:
    root = tmp_path_factory.mktemp("pristine")
    expected = asyncio.run(_build(root / "closed", root / "crashed"))
    return root / "crashed", expected


# ---------------------------------------------------------------- damage


def _cdir(d: Path) -> Path:
    return d / "container-0000"


def _newest_log(d: Path) -> Path:
    return sorted((_cdir(d) / "log").glob("*.log"))[-1]


def _checkpoint(d: Path) -> Path:
    (path,) = _cdir(d).glob("checkpoint-*.ckp")
    return path


def _chunk_of(d: Path, seg_id: int) -> Path:
    return _cdir(d) / "chunks" / f"{seg_id:016x}.00000000"


def _flip(path: Path, at: int) -> Path:
    raw = bytearray(path.read_bytes())
    raw[at] ^= 0x20
    path.write_bytes(bytes(raw))
    return path


def log_header(d: Path) -> Path:
    return _flip(_newest_log(d), 3)


def log_record_middle(d: Path) -> Path:
    path = _newest_log(d)
    return _flip(path, path.read_bytes().index(_post(POST // 2)) + 7)


def log_tail(d: Path) -> Path:
    """The last append reached the disk only in part (the file is preallocated: zeros)."""
    path = _newest_log(d)
    raw = bytearray(path.read_bytes())
    at = raw.index(_post(POST - 1)) + 30
    raw[at:] = bytes(len(raw) - at)
    path.write_bytes(bytes(raw))
    return path


def checkpoint_missing(d: Path) -> Path:
    path = _checkpoint(d)
    path.unlink()
    return _cdir(d)


def checkpoint_truncated(d: Path) -> Path:
    path = _checkpoint(d)
    os.truncate(path, path.stat().st_size // 2)
    return path


def checkpoint_flipped(d: Path) -> Path:
    path = _checkpoint(d)
    return _flip(path, path.stat().st_size // 2)


# Segment ids are given at creation: stream/a 1, stream/b 2, the table 3.
def chunk_flipped(d: Path) -> Path:
    return _flip(_chunk_of(d, 2), 5000)


def chunk_zeroed_block(d: Path) -> Path:
    path = _chunk_of(d, 2)
    with open(path, "r+b") as f:
        f.seek(8192)
        f.write(bytes(4096))
    return path


def chunk_truncated(d: Path) -> Path:
    path = _chunk_of(d, 2)
    os.truncate(path, 10_000)
    return path


def chunk_missing(d: Path) -> Path:
    path = _chunk_of(d, 2)
    path.unlink()
    return path


def table_chunk_flipped(d: Path) -> Path:
    return _flip(_chunk_of(d, 3), 700)


@dataclass(frozen=True)
class Case:
    damage: Callable[[Path], Path]
    outcome: str  # "recovered", "refused" or "reads fail"
    broken: str = ""  # the segment whose reads fail
    lost_tail: bool = False  # the torn last append was never acknowledged


CASES = [
    Case(log_header, "refused"),
    Case(log_record_middle, "refused"),
    Case(log_tail, "recovered", lost_tail=True),
    Case(checkpoint_missing, "refused"),
    Case(checkpoint_truncated, "refused"),
    Case(checkpoint_flipped, "refused"),
    Case(chunk_flipped, "reads fail", STREAMS[1]),
    Case(chunk_zeroed_block, "reads fail", STREAMS[1]),
    Case(chunk_truncated, "reads fail", STREAMS[1]),
    Case(chunk_missing, "reads fail", STREAMS[1]),
    Case(table_chunk_flipped, "reads fail", TABLE),
]


# ---------------------------------------------------------------- outcomes


def _serve(data_dir: Path) -> subprocess.Popen[str]:
    args = [sys.executable, "-m", "segmentstore", "serve", "--data-dir", str(data_dir)]
    args += ["--port", "0", "--http-port", "-1", "--controller-port", "-1", "--host", "127.0.0.1"]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _serve_until_ready(data_dir: Path) -> str:
    """Start ``serve``, wait for its ready line, stop it with SIGTERM; returns its stderr."""
    proc = _serve(data_dir)
    assert proc.stderr is not None
    lines = []
    deadline = time.monotonic() + 60
    try:
        for line in proc.stderr:
            lines.append(line)
            if "segmentstore ready" in line or time.monotonic() > deadline:
                break
        assert any("segmentstore ready" in ln for ln in lines), "".join(lines)
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0, "".join(lines) + rest
    return "".join(lines) + rest


def _snapshot(d: Path) -> dict[str, str]:
    return {
        str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(d.rglob("*"))
        if p.is_file() and p.name != "LOCK"
    }


async def _read_all(s: SegmentStore, name: str) -> bytes:
    info = s.info(name)
    got = bytearray()
    while info.start_offset + len(got) < info.length:
        got += (await s.read(name, info.start_offset + len(got), 1 << 20)).data
    return bytes(got)


async def _check_reads(d: Path, case: Case, expected: dict[str, bytes], named: Path) -> None:
    async with await SegmentStore.open(_config(d)) as s:
        for name, data in expected.items():
            if name == case.broken:
                with pytest.raises(SegmentDamaged, match=named.name):
                    await _read_all(s, name)
                continue
            got = await _read_all(s, name)
            if case.lost_tail and name == STREAMS[0]:
                assert got == data[: -len(_post(POST - 1))]
            else:
                assert got == data, name
        if case.broken == TABLE:
            with pytest.raises(SegmentDamaged, match=named.name):
                await _read_all(s, TABLE)
            tables = await TableStore.open(s)  # the other tables (none here) stay served
            with pytest.raises(SegmentDamaged):
                await tables.get(TABLE, [b"key-1"])
            await tables.close()
        elif case.broken:
            # The damaged segment refuses appends; every other one takes them.
            with pytest.raises(SegmentDamaged):
                await s.append(case.broken, b"more")
            await s.append(STREAMS[0], b"more")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.damage.__name__)
def test_damage_at_rest(
    tmp_path: Path,
    pristine: tuple[Path, dict[str, bytes]],
    case: Case,
    capsys: pytest.CaptureFixture[str],
) -> None:
    source, expected = pristine
    d = tmp_path / "data"
    shutil.copytree(source, d)
    named = case.damage(d)
    rel = str(named.relative_to(d))

    # `segmentstore check` finds every damage, and changes nothing.
    before = _snapshot(d)
    code = cli.main(["check", str(d)])
    said = capsys.readouterr().out
    if case.outcome == "recovered":
        assert code == 0, said
    else:
        assert code == 1, said
        assert rel in said or named.name in said, said
    assert _snapshot(d) == before

    if case.outcome == "refused":
        proc = _serve(d)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == cli.EXIT_STORAGE, err
        assert "Traceback" not in err, err
        refusal = [ln for ln in err.splitlines() if "cannot start" in ln]
        assert len(refusal) == 1, err
        assert named.name in refusal[0], refusal[0]
        assert _snapshot(d) == before  # nothing cut, renamed or deleted
        return
    log = _serve_until_ready(d)
    assert "Traceback" not in log, log
    asyncio.run(_check_reads(d, case, expected, named))


def test_pristine_directory_checks_clean(
    pristine: tuple[Path, dict[str, bytes]], capsys: pytest.CaptureFixture[str]
) -> None:
    source, _ = pristine
    assert cli.main(["check", str(source)]) == 0
    assert "OK" in capsys.readouterr().out


async def test_offline_commands_refuse_while_a_store_has_the_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with await SegmentStore.open(_config(tmp_path)):
        assert cli.main(["check", str(tmp_path)]) == 3
        assert cli.main(["repair", str(tmp_path), "--truncate-at", "x:0"]) == 3
    assert "in use" in capsys.readouterr().err
    assert cli.main(["check", str(tmp_path / "nowhere")]) == 2
    bad = ["repair", str(tmp_path), "--truncate-at", "container-0000/log/none.log:0"]
    assert cli.main(bad) == 2
