"""Process-level resource choices of the server: the read cache's default size, how
freed memory is kept for reuse (and handed back after an attack), and the connection cap
derived from the file-descriptor limit.

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
  nothing. ``release_freed_memory`` (``malloc_trim``) hands the free heap back once, after
  a burst of buffered bytes (many hostile connections) is gone, so the resident size
  returns near its baseline.
* Connections, chunk files, log files and the metrics endpoint share the process's file
  descriptors. At start-up the soft RLIMIT_NOFILE is raised to the hard limit (as servers
  do), and the connection cap is that limit minus a reserve for storage, so hostile
  connections cannot make chunk writes fail with "Too many open files".
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os
import resource
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


def release_freed_memory() -> bool:
    """Return the free parts of glibc's heaps to the kernel (``malloc_trim(0)``)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return bool(trim(0))


MIN_FD_RESERVE = 64


def raise_fd_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit; return the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as e:
            log.warning("could not raise the open-file limit from %d to %d: %s", soft, target, e)
    return soft


def connection_cap(fd_limit: int, asked: int, reserve: int) -> tuple[int, int]:
    """(connection cap, fd reserve): ``asked`` (0 = as many as fit) bounded by the fds
    left after the reserve for storage; the reserve is max(64, 1/8 of the limit) if 0."""
    reserve = reserve or max(MIN_FD_RESERVE, fd_limit // 8)
    fit = max(1, fd_limit - reserve)
    return (fit if asked == 0 else min(asked, fit)), reserve
