"""ChunkStore on real files, with direct I/O and buffered: writes at any offset, in any
split, read back exactly; direct writes cover whole blocks without losing the bytes before
them; reads never return padding."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from segmentstore.storage.chunk_sums import ChunkDamaged
from segmentstore.storage.chunk_sums import cut as cut_sums
from segmentstore.storage.chunks import ALIGN, ChunkStore

CHUNK = 4 * ALIGN


def make(tmp_path: Path, direct: bool, chunk: int = CHUNK) -> ChunkStore:
    store = ChunkStore(tmp_path / "chunks", chunk, direct_io=direct)
    store.open()
    if direct and not store.direct:
        pytest.skip("this filesystem does not support O_DIRECT")
    assert store.direct == direct
    return store


def split(data: bytes, rng: random.Random) -> list[bytes | bytearray | memoryview]:
    """``data`` as 1-4 pieces of mixed buffer types."""
    cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(0, 3))))
    pieces: list[bytes | bytearray | memoryview] = []
    for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True):
        kind = rng.randrange(3)
        part = data[a:b]
        pieces.append(part if kind == 0 else bytearray(part) if kind == 1 else memoryview(part))
    return pieces


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "buffered"])
@pytest.mark.parametrize("seed", range(6))
def test_appends_read_back_exactly(tmp_path: Path, direct: bool, seed: int) -> None:
    rng = random.Random(seed)
    store = make(tmp_path, direct)
    model = bytearray()
    for _ in range(60):
        size = rng.choice([1, 7, ALIGN - 1, ALIGN, ALIGN + 1, 3 * ALIGN + 5, CHUNK + 17])
        size = max(1, int(size * rng.uniform(0.5, 1.5)))
        data = os.urandom(size)
        offset = len(model)
        if rng.random() < 0.5 and offset % ALIGN:
            # As the container does when its cache still holds the block's head.
            start = offset - offset % ALIGN
            store.write(7, start, split(bytes(model[start:]) + data, rng))
        else:
            store.write(7, offset, split(data, rng))
        model += data
        for _ in range(3):
            a = rng.randrange(len(model))
            b = rng.randint(a, min(len(model), a + 3 * CHUNK))
            assert store.read(7, a, b) == bytes(model[a:b])
    assert store.read(7, 0, len(model)) == bytes(model)
    files = store.list_files()[7]
    assert sorted(files) == list(range((len(model) - 1) // CHUNK + 1))


def test_direct_write_pads_whole_blocks_and_keeps_the_head(tmp_path: Path) -> None:
    store = make(tmp_path, True)
    store.write(1, 0, [b"a" * 100])
    path = store.path(1, 0)
    assert path.read_bytes()[100:ALIGN] == bytes(ALIGN - 100)  # padded to a whole block
    # After the data region, the block checksums: one 8-byte entry for the one block.
    assert path.stat().st_size == CHUNK + 8
    store.write(1, 100, [b"b" * 50])  # the head [0, 100) is read back from the file
    assert store.read(1, 0, 150) == b"a" * 100 + b"b" * 50
    assert path.read_bytes()[:150] == b"a" * 100 + b"b" * 50
    # Recovery cuts a file's block checksums back to the durable length; writing on from
    # there still works (the bytes past it are no longer vouched for, then overwritten).
    cut_sums(path, CHUNK, 120)
    store.write(1, 120, [b"c" * (CHUNK - 120 + 10)])  # crosses into chunk 1
    want = b"a" * 100 + b"b" * 20 + b"c" * (CHUNK - 110)
    assert store.read(1, 0, CHUNK + 10) == want
    assert store.read(1, CHUNK, CHUNK + 10) == b"c" * 10
    # Bytes no checksum covers (here the zero padding of the last block) are never handed
    # out: the container never reads past a segment's length, and a read that does fails.
    with pytest.raises(ChunkDamaged, match="are needed"):
        store.read(1, CHUNK + 5, CHUNK + 5000)


def test_direct_write_refuses_when_the_head_is_missing(tmp_path: Path) -> None:
    store = make(tmp_path, True)
    store.write(2, 0, [b"x" * 10])
    os.truncate(store.path(2, 0), 5)  # bytes [5, 10) lost
    with pytest.raises(ChunkDamaged, match="lacks segment bytes"):
        store.write(2, 10, [b"y"])
    # The checksums after the data were cut off with it: nothing left is served.
    with pytest.raises(ChunkDamaged, match="no checksum"):
        store.read(2, 0, 5)


def test_unaligned_chunk_size_uses_buffered_io(tmp_path: Path) -> None:
    store = ChunkStore(tmp_path / "chunks", 3000, direct_io=True)
    store.open()
    assert not store.direct
    store.write(3, 0, [b"z" * 7000])
    assert store.read(3, 2990, 3010) == b"z" * 20
    # 1000 data bytes, then at 3000 (the chunk size) the checksum of its one block.
    assert store.path(3, 2).stat().st_size == 3000 + 8
    assert store.path(3, 2).read_bytes()[:1000] == b"z" * 1000


def test_big_writes_span_the_staging_buffer(tmp_path: Path) -> None:
    store = make(tmp_path, True, chunk=16 * 1024 * 1024)
    data = os.urandom(9 * 1024 * 1024 + 123)  # more than two staging buffers
    store.write(4, 0, [data[:5]])
    store.write(4, 5, [data[5:]])
    assert store.read(4, 0, len(data)) == data
    assert (
        store.read(4, 4 * 1024 * 1024 - 3, 8 * 1024 * 1024 + 3)
        == data[4 * 1024 * 1024 - 3 : 8 * 1024 * 1024 + 3]
    )
