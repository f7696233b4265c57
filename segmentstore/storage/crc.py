# CRC-32C (Castagnoli) for log records and checkpoints.
#
# Contract: ``crc32c(data)`` and ``crc32c_extend(crc, data)`` accept ``bytes`` only (the C
# extension of google-crc32c parses "y#", which rejects memoryview and bytearray; callers
# slice to bytes). ``IMPLEMENTATION`` names what loaded: "c" (google-crc32c's C extension),
# "python" (its pure-Python fallback) or "builtin-table" (our own fallback when the package is
# missing). The pure-Python variants are ~1000x slower, so loading one is logged as a warning.
from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger("segmentstore.storage")

_POLY = 0x82F63B78


def _make_table() -> list[int]:
    table = []
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ _POLY if crc & 1 else crc >> 1
        table.append(crc)
    return table


def _table_extend(crc: int, data: bytes) -> int:
    table = _TABLE
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


_TABLE = _make_table()

crc32c_extend: Callable[[int, bytes], int]
crc32c: Callable[[bytes], int]

try:
    import google_crc32c

    IMPLEMENTATION: str = str(google_crc32c.implementation)
    crc32c_extend = google_crc32c.extend
    crc32c = google_crc32c.value
except ImportError:  # the "server" extra not installed: keep working, loudly slower
    IMPLEMENTATION = "builtin-table"
    crc32c_extend = _table_extend

    def crc32c(data: bytes) -> int:
        return _table_extend(0, data)


def log_implementation() -> None:
    """Say which CRC-32C implementation is in use; warn when it is a slow fallback."""
    if IMPLEMENTATION == "c":
        log.info("crc32c: google-crc32c C extension loaded")
    else:
        log.warning(
            "crc32c: using the pure-Python %s implementation; log writes and recovery "
            "will be far slower (install google-crc32c with its C extension)",
            IMPLEMENTATION,
        )
