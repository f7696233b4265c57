"""Process-level resource choices of the server: the read cache's default size and how
freed memory is kept for reuse.

* The read cache is the only cache segment data has once chunk files bypass the page cache
  (O_DIRECT), so by default it gets 1/8 of the memory the process may use (the machine's,
  or a smaller cgroup limit), between 64 MiB and 1 GiB.
* glibc returns freed memory to the kernel eagerly: blocks of 128 KiB and up are mmap'd and
  unmapped one by one, and the top of the heap is trimmed. The server frees about as much
  as it allocates (append payloads, cache blocks, reads), so each allocation would then take
  fresh pages: a page fault and a zeroed page per 4 KiB, and on a VM with free page reporting
  a host fault too (a 64 KiB-append benchmark spent a third of its event-loop thread there).
  ``keep_freed_memory`` makes glibc serve allocations below 32 MiB from its heaps and trim
  only above 1 GiB of free heap, so freed memory is reused. Elsewhere (musl, macOS) it does
  nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os
from pathlib import Path

log = logging.getLogger("segmentstore.server")

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's largest allowed value on 64-bit
TRIM_THRESHOLD = 1024 * 1024 * 1024

MIN_CACHE_MB = 64
MAX_DEFAULT_CACHE_MB = 1024


def memory_limit_bytes() -> int | None:
    """Memory this process may use: physical memory, or a lower cgroup v2/v1 limit."""
    limits = []
    with contextlib.suppress(ValueError, OSError):
        limits.append(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            limits.append(int(text))
    return min(limits) if limits else None


def default_read_cache_mb(limit_bytes: int | None) -> int:
    """1/8 of ``limit_bytes``, clamped to [64 MiB, 1 GiB]; 256 MiB if the limit is unknown."""
    if limit_bytes is None:
        return 256
    return max(MIN_CACHE_MB, min(MAX_DEFAULT_CACHE_MB, limit_bytes // 8 // (1024 * 1024)))


def keep_freed_memory() -> bool:
    """Tell glibc's malloc to keep freed memory for reuse (see the module doc)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    mmap_ok: int = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    trim_ok: int = mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    return mmap_ok == 1 and trim_ok == 1
