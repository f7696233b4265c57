"""``segmentstore check DATA_DIR`` and ``segmentstore repair DATA_DIR --truncate-at F:O``.

``check`` verifies a stopped store's log, checkpoints and chunk files and changes nothing;
``repair`` drops a damaged log's rest only when asked to, saying what it moved aside.
Exit codes: 0 clean (check) or repaired (repair); 1 damage found; 2 bad arguments or not a
data directory; 3 the directory is in use by a running store.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from segmentstore.storage import StorageError
from segmentstore.storage.store import lock_data_dir
from segmentstore.storage.verify import check_data_dir, truncate_log

EXIT_DAMAGE = 1
EXIT_USAGE = 2
EXIT_IN_USE = 3


def add_parser(subparsers: Any) -> None:
    c = subparsers.add_parser(
        "check",
        help="verify a stopped store's log, checkpoints and chunk files (changes nothing)",
        description="Verify the data directory of a stopped store offline: log records, "
        "checkpoints, chunk files and their checksums. Exit 0 if clean, 1 if damaged.",
        epilog="examples:\n  segmentstore check ./segmentstore-data\n"
        "  segmentstore check /var/lib/segmentstore --fsync never",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    c.add_argument("data_dir", type=Path)
    c.add_argument(
        "--fsync",
        choices=("always", "interval", "never"),
        default="always",
        help="the fsync mode the store runs with: it decides which log damage a power "
        "loss may leave (default always)",
    )
    c.add_argument("--chunk-file-bytes", type=int, help="chunk file size if store.json lacks it")
    c.set_defaults(func=check_handler)
    r = subparsers.add_parser(
        "repair",
        help="drop a damaged log's rest, when asked (moved aside, not deleted)",
        description="Repair a stopped store's data directory. --truncate-at LOGFILE:OFFSET "
        "(as `segmentstore check` or a refusal to start names it) moves the bytes of LOGFILE "
        "from OFFSET on, and every later log file of that container, into *.discarded files: "
        "the records there are lost to the store.",
        epilog="examples:\n  segmentstore check ./segmentstore-data      # names the damage\n"
        "  segmentstore repair ./segmentstore-data --truncate-at "
        "container-0000/log/0000000000000003.log:81920",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    r.add_argument("data_dir", type=Path)
    r.add_argument("--truncate-at", required=True, metavar="LOGFILE:OFFSET")
    r.set_defaults(func=repair_handler)


def _err(message: str) -> None:
    print(f"segmentstore: {message}", file=sys.stderr)


def _locked(data_dir: Path, job: Callable[[], int]) -> int:
    """Run ``job`` holding the data directory's lock (no store may have it open)."""
    if not (data_dir / "store.json").is_file():
        _err(f"{data_dir}: not a segment store data directory (no store.json)")
        return EXIT_USAGE
    try:
        fd = lock_data_dir(data_dir)
    except StorageError as exc:
        _err(str(exc))
        return EXIT_IN_USE
    try:
        return job()
    except (ValueError, StorageError) as exc:
        _err(str(exc))
        return EXIT_USAGE
    finally:
        os.close(fd)


def check_handler(args: argparse.Namespace) -> int:
    return _locked(args.data_dir, lambda: _check(args))


def _check(args: argparse.Namespace) -> int:
    findings = check_data_dir(args.data_dir, args.fsync, args.chunk_file_bytes)
    damaged = [f for f in findings if f.severity == "damage"]
    for f in findings:
        print(f"{f.severity.upper():6} {f.where}: {f.what}")
    if damaged:
        print(f"DAMAGED: {len(damaged)} problem(s) in {args.data_dir}")
        return EXIT_DAMAGE
    print(f"OK: {args.data_dir} is consistent")
    return 0


def repair_handler(args: argparse.Namespace) -> int:
    return _locked(args.data_dir, lambda: _repair(args))


def _repair(args: argparse.Namespace) -> int:
    done = truncate_log(args.data_dir, args.truncate_at)
    for line in done:
        print(line)
    if not done:
        print("nothing to drop: the log already ends there")
    return 0
