# Damage at rest: how recovery and the offline tools tell it from a torn tail, and what they
# say and do about it.
#
# Contract.
# * ``later_record`` looks for an intact record (CRC checks) numbered ``first_seq`` ..
#   ``first_seq + LOOKAHEAD`` in a byte range. Finding one after a bad record proves the bad
#   record is damage inside written data, not the end of the last write; not finding one
#   lets recovery treat the bad bytes as a torn tail (a zeroed range hiding more than
#   LOOKAHEAD records is taken for a tail: the README says so).
# * ``set_aside`` / ``set_aside_file`` never delete: they move bytes into ``*.discarded``
#   files next to the log (unique names), so an operator can still inspect or restore them.
# * ``LogDamage.damage`` is recovery's one decision on damage: refuse (``StoreCorrupted``
#   whose one-line message names the file and the ``segmentstore repair`` command), or, where
#   the fsync mode lets a power loss leave such damage, keep the intact prefix, set the rest
#   aside and log an ERROR saying what is lost.
from __future__ import annotations

import logging
import mmap
import os
import shutil
import struct
from pathlib import Path

from . import records as R
from .api import FsyncMode, StoreCorrupted
from .crc import crc32c
from .wal import LogFileInfo

log = logging.getLogger("segmentstore.storage")

LOOKAHEAD = 32  # sequence numbers searched for after a bad record
_SEQ = struct.Struct("<Q")


def later_record(buf: mmap.mmap | bytes, start: int, end: int, first_seq: int) -> int | None:
    """Position of an intact record numbered ``first_seq``..``+LOOKAHEAD`` in ``buf[start:end]``."""
    best: int | None = None
    for seq in range(first_seq, first_seq + LOOKAHEAD + 1):
        pattern = _SEQ.pack(seq)
        at = buf.find(pattern, start + 8, end)
        while at >= 0 and (best is None or at - 8 < best):
            pos = at - 8
            if _intact(buf, pos, end, seq):
                best = pos
                break
            at = buf.find(pattern, at + 1, end)
    return best


def _intact(buf: mmap.mmap | bytes, pos: int, end: int, seq: int) -> bool:
    if end - pos < R.PREFIX_SIZE:
        return False
    crc, size, got_seq, rtype = R.PREFIX.unpack_from(buf, pos)
    rec_end = pos + 8 + size
    if got_seq != seq or rtype not in R.RECORD_TYPES or size < R.SEQ_TYPE_SIZE or rec_end > end:
        return False
    return bool(crc32c(bytes(buf[pos + 4 : rec_end])) == crc)


def file_holds_records(path: Path, first_seq: int) -> int | None:
    """``later_record`` over a whole file (one whose header is bad, so searched from 0)."""
    size = path.stat().st_size
    if size == 0:
        return None
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        return later_record(mm, 0, size, first_seq)


def _unique(path: Path, suffix: str) -> Path:
    target = path.with_name(path.name + suffix)
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}{suffix}.{n}")
    return target


def set_aside_file(path: Path) -> Path:
    """Rename ``path`` to a unique ``<name>.discarded``; returns the new path."""
    target = _unique(path, ".discarded")
    os.replace(path, target)
    return target


def set_aside(path: Path, offset: int) -> Path | None:
    """Move bytes ``[offset, end)`` of ``path`` into a ``.discarded`` file and cut ``path``
    there (the whole file is renamed when ``offset`` is 0); None if nothing was there."""
    size = path.stat().st_size
    if offset <= 0:
        return set_aside_file(path)
    if offset >= size:
        return None
    target = _unique(path, f".from-{offset}.discarded")
    with open(path, "rb") as src, open(target, "wb") as dst:
        src.seek(offset)
        shutil.copyfileobj(src, dst, 1 << 20)
        dst.flush()
        os.fsync(dst.fileno())
    os.truncate(path, offset)
    return target


def data_dir_of(container_dir: Path) -> Path:
    return container_dir.parent


def refusal(container_dir: Path, path: Path, offset: int, problem: str) -> str:
    """The message of a refusal to start: what is damaged, and the commands that help."""
    data_dir = data_dir_of(container_dir)
    rel = path.relative_to(data_dir) if path.is_relative_to(data_dir) else path
    return (
        f"{problem}. Acknowledged data may lie at or after that point, so the store will "
        f"not start. See `segmentstore check {data_dir}`; restore {rel} from a backup, or "
        f"drop everything from there on with "
        f"`segmentstore repair {data_dir} --truncate-at {rel}:{offset}`"
    )


class LogDamage:
    """What recovery does on damage in the log: refuse, or (where the fsync mode allows a
    power loss to leave it) keep the intact prefix and set the rest aside, loudly."""

    def __init__(
        self, container_dir: Path, label: str, fsync: FsyncMode, dry_run: bool, problems: list[str]
    ) -> None:
        self.container_dir = container_dir
        self.label = label
        self.fsync = fsync
        self.dry_run = dry_run
        self.problems = problems

    def damage(self, info: LogFileInfo, offset: int, problem: str, tolerated: bool) -> None:
        if not tolerated:
            raise StoreCorrupted(
                str(info.path), refusal(self.container_dir, info.path, offset, problem)
            )
        msg = (
            f"{info.path}: {problem}. With fsync={self.fsync} a power loss may leave this: recovered the "
            f"records before byte {offset} of {info.path.name}; what was written to it from "
            f"there on, and to every later log file, is lost (set aside as *.discarded)"
        )
        log.error("recovery %s: %s", self.label, msg)
        self.problems.append(msg)
        if not self.dry_run:
            set_aside(info.path, offset)

    def set_aside_file(self, info: LogFileInfo) -> None:
        self.problems.append(f"{info.path}: follows damage, set aside")
        if not self.dry_run:
            target = set_aside_file(info.path)
            log.error("recovery %s: set aside %s as %s", self.label, info.path, target.name)
