"""Routing keys land where the official client puts them (the ``pravega`` package, in a
subprocess), and the key-range map replaces sealed segments correctly."""

from __future__ import annotations

import pytest
import segmentstore_client as sc
from controller.conftest import Ctl, controller_uri, run_driver
from segmentstore_client.streams.routing import (
    KeyRange,
    KeyRanges,
    key_bytes,
    key_hash,
    murmur3_x64_128,
)


def test_murmur3_and_key_hash_known_values() -> None:
    # MurmurHash3 x64-128 reference value, and the official Rust client's own test vector.
    assert murmur3_x64_128(b"hello", 0) == (0xCBD8A7B341BD9B02, 0x5B1E906A48AE1D19)
    assert murmur3_x64_128(b"", 0) == (0, 0)
    assert key_hash("hello") == 0.658716230571337
    assert key_bytes("h\u00e9") == "h\u00e9".encode("utf-16-le") + bytes(2)  # 3 UTF-8 bytes
    assert all(0.0 <= key_hash(f"k{i}") < 1.0 for i in range(1000))


def test_key_ranges_route_and_replace() -> None:
    m = KeyRanges([KeyRange(0, 0.0, 0.5), KeyRange(1, 0.5, 1.0)])
    assert m.route(0.1) == 0 and m.route(0.5) == 0 and m.route(0.51) == 1 and m.route(1.0) == 1
    merged = m.replace(0, [KeyRange(7, 0.0, 1.0)])  # 2 -> 1: A replaced, B still open
    assert merged.route(0.2) == 7 and merged.route(0.7) == 1
    assert merged.replace(1, [KeyRange(7, 0.0, 1.0)]).segments == {7}
    split = m.replace(1, [KeyRange(8, 0.5, 0.75), KeyRange(9, 0.75, 1.0)])
    assert split.route(0.6) == 8 and split.route(0.9) == 9 and split.route(0.3) == 0
    with pytest.raises(ValueError):
        m.replace(0, [KeyRange(9, 0.6, 1.0)])


async def test_keys_land_where_the_official_client_puts_them(ctl: Ctl, tmp_path: object) -> None:
    uri = controller_uri(ctl.server)
    keys = 64
    async with sc.connect(ctl.server.endpoint, controller=uri) as c:
        await c.create_scope("h")
        await c.create_stream("h/s", 5)
        run_driver("write", uri=uri, scope="h", stream="s", count=keys * 2, keys=keys)
        info = await c.stream_info("h/s")
        ranges = KeyRanges(info.epochs[0])
        landed: dict[str, int] = {}
        for sid, st in info.segments.items():
            async for ev in c.reader(st.name):
                key = ev.data.decode().rsplit(":", 1)[0]
                assert landed.setdefault(key, sid) == sid, f"{key} in two segments"
        assert len(landed) == keys
        for key, sid in landed.items():
            assert ranges.route(key_hash(key)) == sid, key
        assert len(set(landed.values())) == 5  # 64 keys reach every segment
