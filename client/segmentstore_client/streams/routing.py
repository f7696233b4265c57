"""Routing keys to segments, as the official Pravega clients route them.

Contract: ``key_hash(key)`` maps a routing key to [0, 1) exactly as the official Rust
client (which the ``pravega`` Python package wraps) does: MurmurHash3 x64-128 seeded with
Java's ``"EventRouter".hashCode()`` over the key's UTF-16 code units (the Java client's
input; the Rust client zero-pads it to the key's UTF-8 length, so non-ASCII keys follow
the Rust client), then the top 52 bits of the first 64-bit half as a fraction. A
:class:`KeyRanges` map sends a hash to the segment whose range ends at or after it (the
first by upper bound, as the official client's map does), and replaces a sealed segment by
the parts of its successors' ranges that fall inside its own range. No I/O here.
"""

from __future__ import annotations

import random
from bisect import bisect_left
from dataclasses import dataclass

_MASK = 0xFFFFFFFFFFFFFFFF
_MANTISSA = 0xFFFFFFFFFFFFF
_SCALE = 1.0 / (1 << 52)


def _rotl(x: int, b: int) -> int:
    return ((x << b) | (x >> (64 - b))) & _MASK


def _fmix(k: int) -> int:
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & _MASK
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & _MASK
    return k ^ (k >> 33)


def murmur3_x64_128(data: bytes, seed: int = 0) -> tuple[int, int]:
    """MurmurHash3 x64 128-bit of ``data``: its two 64-bit halves (h1, h2)."""
    c1, c2 = 0x87C37B91114253D5, 0x4CF5AD432745937F
    h1 = h2 = seed & _MASK
    n = len(data)
    end = n - n % 16
    for i in range(0, end + 16, 16):  # the blocks, then the zero-padded tail
        block = data[i : i + 16]
        if not block:
            break
        k1 = int.from_bytes(block[:8], "little")
        k2 = int.from_bytes(block[8:16], "little")
        k1 = (_rotl((k1 * c1) & _MASK, 31) * c2) & _MASK
        k2 = (_rotl((k2 * c2) & _MASK, 33) * c1) & _MASK
        if len(block) < 16:  # the tail: mixed in without the block's rotations
            h1 ^= k1
            h2 ^= k2
            break
        h1 ^= k1
        h1 = (((_rotl(h1, 27) + h2) & _MASK) * 5 + 0x52DCE729) & _MASK
        h2 ^= k2
        h2 = (((_rotl(h2, 31) + h1) & _MASK) * 5 + 0x38495AB5) & _MASK
    h1 ^= n
    h2 ^= n
    h1 = (h1 + h2) & _MASK
    h2 = (h2 + h1) & _MASK
    h1, h2 = _fmix(h1), _fmix(h2)
    h1 = (h1 + h2) & _MASK
    h2 = (h2 + h1) & _MASK
    return h1, h2


# The official clients' seed: Java's "EventRouter".hashCode().
_SEED = 1741865571


def key_bytes(key: str) -> bytes:
    """The bytes the official Rust client hashes: the key's UTF-16LE code units in a buffer
    of as many units as the key has UTF-8 bytes (zero-padded when the key is not ASCII)."""
    utf8 = len(key.encode("utf-8", "surrogatepass"))
    units = key.encode("utf-16-le", "surrogatepass")
    return units + bytes(2 * utf8 - len(units))


_CACHE: dict[str, float] = {}
CACHE_LIMIT = 1 << 16  # keys memoised (here and per stream writer) before the memo is reset
CACHED_KEY_CHARS = 1024  # longer keys are hashed each time: the memo stays small in bytes


def key_hash(key: str) -> float:
    """The routing key's position in [0, 1), the official clients' choice (memoised);
    TypeError for a key that is not a str."""
    h = _CACHE.get(key)
    if h is None:
        if not isinstance(key, str):
            raise TypeError(f"a routing key is a str, not {type(key).__name__}")
        h = ((murmur3_x64_128(key_bytes(key), _SEED)[0] >> 12) & _MANTISSA) * _SCALE
        if len(key) <= CACHED_KEY_CHARS:
            if len(_CACHE) >= CACHE_LIMIT:
                _CACHE.clear()
            _CACHE[key] = h
    return h


def random_hash() -> float:
    """Where an event without a routing key goes: uniform over [0, 1)."""
    return random.random()


@dataclass(frozen=True, slots=True)
class KeyRange:
    segment: int
    low: float
    high: float


_EPSILON = 1e-9  # the controller's tolerance where two key ranges meet
_MAX_SEGMENT_ID = (1 << 63) - 1


def range_problem(r: KeyRange) -> str | None:
    """What is wrong with one key range a controller sent (None: nothing)."""
    if not isinstance(r.segment, int) or not 0 <= r.segment <= _MAX_SEGMENT_ID:
        return f"segment id {r.segment!r} is not a non-negative 64-bit number"
    if not (0.0 <= r.low < r.high <= 1.0):  # also false for NaN
        return f"segment {r.segment} has the key range [{r.low}, {r.high}), not inside [0, 1)"
    return None


def tiling_problem(ranges: list[KeyRange]) -> str | None:
    """What keeps ``ranges`` from tiling [0, 1) once each (None: they do): routing over a
    gap, an overlap or a NaN bound would send keys to the wrong segment without a word."""
    if not ranges:
        return "no segments"
    pos, seen = 0.0, set()
    for r in sorted(ranges, key=lambda r: (r.low, r.high)):
        problem = range_problem(r)
        if problem is not None:
            return problem
        if r.segment in seen:
            return f"segment {r.segment} is listed twice"
        seen.add(r.segment)
        if abs(r.low - pos) > _EPSILON:
            where = "a gap" if r.low > pos else "an overlap"
            return f"{where} in the key space at {min(pos, r.low)} (segment {r.segment})"
        pos = r.high
    if abs(pos - 1.0) > _EPSILON:
        return f"the key space ends at {pos}, not 1"
    return None


class KeyRanges:
    """Which segment takes which hash: pieces of [0, 1) sorted by upper bound."""

    def __init__(self, ranges: list[KeyRange]) -> None:
        self._pieces = sorted(ranges, key=lambda r: r.high)
        self._highs = [r.high for r in self._pieces]

    @property
    def segments(self) -> set[int]:
        return {p.segment for p in self._pieces}

    def route(self, h: float) -> int:
        i = bisect_left(self._highs, h)
        if i == len(self._pieces):
            i -= 1
        return self._pieces[i].segment

    def replace(self, sealed: int, successors: list[KeyRange]) -> KeyRanges:
        """The map with ``sealed`` replaced by its successors, each clipped to the parts of
        the sealed segment's range it overlaps."""
        out: list[KeyRange] = []
        for p in self._pieces:
            if p.segment != sealed:
                out.append(p)
                continue
            covered = 0.0
            for s in successors:
                lo, hi = max(p.low, s.low), min(p.high, s.high)
                if hi > lo:
                    out.append(KeyRange(s.segment, lo, hi))
                    covered += hi - lo
            if covered < (p.high - p.low) - 1e-9:
                raise ValueError(f"the successors of segment {sealed} do not cover its range")
        return KeyRanges(out)
