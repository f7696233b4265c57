"""The in-memory pieces: SortedKeys against a plain sorted list, and record framing."""

from __future__ import annotations

import bisect
import random

import pytest

from segmentstore.tables.index import SortedKeys
from segmentstore.tables.records import (
    REMOVE,
    UPDATE,
    CorruptRecord,
    encode_batch,
    fold_records,
    parse_record,
)


class Tiny(SortedKeys):
    LOAD = 4  # split and empty chunks all the time


@pytest.mark.parametrize("cls", [Tiny, SortedKeys])
def test_sorted_keys_match_a_sorted_list(cls: type[SortedKeys]) -> None:
    rng = random.Random(7)
    initial = {rng.randbytes(rng.randint(1, 3)) for _ in range(50)}
    keys = cls(initial)
    model = sorted(initial)
    for _ in range(3000):
        k = rng.randbytes(rng.randint(1, 3))
        i = bisect.bisect_left(model, k)
        present = i < len(model) and model[i] == k
        if rng.random() < 0.55:
            if not present:
                keys.add(k)
                model.insert(i, k)
        else:
            assert keys.remove(k) == present
            if present:
                del model[i]
        assert len(keys) == len(model)
    assert list(keys.irange(None, None, None)) == model
    for _ in range(200):
        a, lo, hi = (rng.choice([None, rng.randbytes(rng.randint(1, 3))]) for _ in range(3))
        want = [
            k
            for k in model
            if (a is None or k > a) and (lo is None or k >= lo) and (hi is None or k <= hi)
        ]
        assert list(keys.irange(a, lo, hi)) == want, (a, lo, hi)


def test_records_round_trip_and_corruption() -> None:
    payload, offsets = encode_batch([(b"k1", b"v1"), (b"k2", None), (b"k1", b"")], 100)
    assert offsets[0] == 100 and offsets[1] > offsets[0] and offsets[2] > offsets[1]
    rec = parse_record(payload, 0, 100)
    assert rec is not None and (rec.kind, rec.key) == (UPDATE, b"k1")
    rec2 = parse_record(payload, rec.end, 100)
    assert rec2 is not None and (rec2.kind, rec2.key, rec2.value_len) == (REMOVE, b"k2", 0)
    assert parse_record(payload[:-1], offsets[2] - 100, 100) is None  # incomplete
    index: dict[bytes, tuple[int, bytes | int]] = {b"k2": (1, b"old")}
    assert fold_records(payload, 100, index, 1024) == len(payload)
    assert index == {b"k1": (offsets[2], b"")}
    bad = bytearray(payload)
    bad[-1] ^= 0xFF  # the last record's key byte
    with pytest.raises(CorruptRecord) as e:
        fold_records(bytes(bad), 100, {}, 1024)
    assert e.value.offset == offsets[2]
    with pytest.raises(CorruptRecord):
        parse_record(payload, 3, 100)  # not a record boundary
