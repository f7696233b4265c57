# Offline verification and repair of a data directory (``segmentstore check`` / ``repair``).
#
# Contract. Nothing here runs while a store has the directory open: callers hold its LOCK.
# * ``check_data_dir`` changes nothing on disk. Per container it loads the checkpoint, runs
#   recovery as a dry run (the same code that decides at start-up between "torn tail, cut
#   it" and "damage, refuse"), and verifies every chunk file the checkpoint relies on
#   (present, long enough, and every block matching its stored checksum). It returns
#   ``Finding``s: "damage" ones mean the store refuses to start or a segment's reads fail;
#   "note" ones are what a normal start does anyway (e.g. cut a torn tail).
# * ``truncate_log`` is the one repair: it drops the log from a given byte of a given log
#   file on (and every later log file of that container), moving the bytes into
#   ``*.discarded`` files rather than deleting them, and returns what it moved.
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from .api import FsyncMode, StorageError, StoreCorrupted
from .checkpoint import load_newest
from .chunks import ChunkStore
from .damage import set_aside, set_aside_file
from .recovery import recover
from .store import LAYOUT_FILE
from .wal import HEADER_SIZE, list_log_files

DEFAULT_CHUNK_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Finding:
    severity: str  # "damage" or "note"
    where: str  # path of the file concerned, relative to the data directory
    what: str


def read_layout(data_dir: Path) -> dict[str, int]:
    """The layout record of a data directory; StorageError if it is not one."""
    path = data_dir / LAYOUT_FILE
    try:
        layout = json.loads(path.read_text())
    except FileNotFoundError:
        raise StorageError(
            str(data_dir), f"not a segment store data directory (no {LAYOUT_FILE})"
        ) from None
    except (OSError, ValueError) as exc:
        raise StorageError(str(path), f"unreadable: {exc}") from exc
    if not isinstance(layout, dict) or not isinstance(layout.get("container_count"), int):
        raise StorageError(str(path), "has no container_count")
    return layout


def container_dirs(data_dir: Path) -> list[Path]:
    count = read_layout(data_dir)["container_count"]
    return [data_dir / f"container-{i:04d}" for i in range(count)]


def _rel(data_dir: Path, path: Path | str) -> str:
    p = Path(path)
    return str(p.relative_to(data_dir)) if p.is_relative_to(data_dir) else str(p)


def check_data_dir(
    data_dir: Path, fsync: FsyncMode = "always", chunk_bytes: int | None = None
) -> list[Finding]:
    layout = read_layout(data_dir)
    cb = chunk_bytes or layout.get("chunk_file_bytes") or DEFAULT_CHUNK_BYTES
    findings: list[Finding] = []
    for cdir in container_dirs(data_dir):
        if not cdir.is_dir():
            findings.append(Finding("damage", _rel(data_dir, cdir), "container directory missing"))
            continue
        findings.extend(_check_container(data_dir, cdir, fsync, cb))
    return findings


def _check_container(
    data_dir: Path, cdir: Path, fsync: FsyncMode, chunk_bytes: int
) -> list[Finding]:
    out: list[Finding] = []
    chunks = ChunkStore(cdir / "chunks", chunk_bytes, direct_io=False)
    try:
        rec = recover(cdir, chunks, cdir.name, fsync, dry_run=True)
    except StoreCorrupted as exc:
        out.append(Finding("damage", _rel(data_dir, exc.segment), str(exc)))
    else:
        for problem in rec.problems:
            severity = "note" if problem.startswith("torn tail") else "damage"
            out.append(Finding(severity, _rel(data_dir, cdir / "log"), problem))
        out.append(
            Finding(
                "note",
                _rel(data_dir, cdir),
                f"checkpoint at record {rec.checkpoint_seq}, {rec.records} log records after "
                f"it, {len(rec.segments)} segment(s), next record {rec.next_seq}",
            )
        )
    try:
        ckpt = load_newest(cdir)
    except StoreCorrupted:
        return out  # already reported by the dry run
    if ckpt is None or not chunks.dir.is_dir():
        return out
    for seg in ckpt.segments:
        for k, problem in chunks.verify(seg.seg_id, seg.start_offset, seg.length):
            out.append(
                Finding(
                    "damage",
                    _rel(data_dir, chunks.path(seg.seg_id, k)),
                    f"segment {seg.name!r} (id {seg.seg_id}): {problem}; reads of this "
                    f"segment fail until the file is restored or the segment deleted",
                )
            )
    return out


def truncate_log(data_dir: Path, target: str) -> list[str]:
    """Drop the log from ``LOGFILE:OFFSET`` on (LOGFILE relative to ``data_dir``)."""
    rel, sep, offset_text = target.rpartition(":")
    if not sep or not offset_text.isdigit():
        raise ValueError(f"--truncate-at wants LOGFILE:OFFSET, got {target!r}")
    offset = int(offset_text)
    path = (data_dir / rel).resolve()
    cdirs = [c.resolve() for c in container_dirs(data_dir)]
    if path.parent.name != "log" or path.parent.parent not in cdirs or path.suffix != ".log":
        raise ValueError(f"{rel} is not a log file of a container of {data_dir}")
    if not path.is_file():
        raise ValueError(f"{rel} does not exist")
    size = path.stat().st_size
    if offset > size or 0 < offset < HEADER_SIZE:
        raise ValueError(
            f"offset {offset} is not in {rel}: use 0 (the whole file) or {HEADER_SIZE}..{size}"
        )
    done: list[str] = []
    index = int(path.stem)
    moved = set_aside(path, offset)
    if moved is not None:
        what = "the whole file" if offset == 0 else f"bytes {offset}..{size}"
        done.append(f"moved {what} of {rel} to {_rel(data_dir, moved)}")
    for info in list_log_files(path.parent):
        if info.index > index:
            aside = set_aside_file(info.path)
            done.append(
                f"moved later log file {_rel(data_dir, info.path)} ({info.size} bytes) to "
                f"{_rel(data_dir, aside)}"
            )
    os.sync()
    return done
