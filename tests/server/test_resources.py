"""The server's process-level resource choices: the read cache's default size and glibc's
freed-memory policy."""

from __future__ import annotations

import platform

import pytest

from segmentstore.server import resources


@pytest.mark.parametrize(
    ("limit", "want_mb"),
    [
        (None, 256),  # unknown: the old fixed default
        (24 * 2**30, 1024),  # capped at 1 GiB
        (4 * 2**30, 512),  # 1/8
        (2 * 2**30, 256),
        (256 * 2**20, 64),  # never below 64 MiB
    ],
)
def test_default_read_cache_is_an_eighth_of_memory_within_bounds(
    limit: int | None, want_mb: int
) -> None:
    assert resources.default_read_cache_mb(limit) == want_mb


def test_memory_limit_is_at_most_physical_memory() -> None:
    limit = resources.memory_limit_bytes()
    assert limit is not None and limit > 0
    import os

    assert limit <= os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only"
)
def test_keep_freed_memory_takes_effect_on_glibc() -> None:
    assert resources.keep_freed_memory() is True
