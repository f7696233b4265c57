"""Server-side filters of ``/stream`` and ``/bootstrap``: RANGE and MOD on the event key.

Contract (the spec's ``filters`` parameter): a JSON object mapping a source id to
``{"partitionType": "RANGE" | "MOD", "filters": [...]}``; a RANGE filter is
``{"keyRange": {"start": s, "end": e}}``, a MOD filter ``{"numBuckets": n, "bktRange":
{"start": s, "end": e}}``. Numbers may be JSON numbers or decimal strings (the spec's own
example mixes them); bare keys like ``filters:`` as printed in the spec are accepted too.
Our choices where the spec is silent: both ends of ``keyRange`` and ``bktRange`` are
inclusive (the spec calls the end the "last" id/bucket); several filters of one source
match when any does; a long key's MOD bucket is ``key mod n`` (non-negative), a byte[]
key's is ``crc32(key) mod n``; under RANGE a byte[] key that spells a decimal integer is
compared as that integer and any other byte[] key does not match. Control events (window
markers) always pass, and a source with no filter passes everything.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Callable
from typing import Any

KeyTest = Callable[[int | bytes], bool]

_BARE_KEY = re.compile(r"([{,]\s*)([A-Za-z_][A-Za-z0-9_]*)\s*:")


class FilterError(ValueError):
    """The filters parameter does not parse; the message says what is wrong."""


def _int(obj: dict[str, Any], name: str, where: str) -> int:
    try:
        value = obj[name]
        if isinstance(value, bool):
            raise TypeError
        return int(value)
    except (KeyError, TypeError, ValueError):
        raise FilterError(f"{where}: {name} must be an integer") from None


def _range_test(lo: int, hi: int) -> KeyTest:
    def test(key: int | bytes) -> bool:
        if isinstance(key, bytes):
            if not key.isdigit() and not (key[:1] == b"-" and key[1:].isdigit()):
                return False
            key = int(key)
        return lo <= key <= hi

    return test


def _mod_test(buckets: int, lo: int, hi: int) -> KeyTest:
    def test(key: int | bytes) -> bool:
        n = key if isinstance(key, int) else zlib.crc32(key)
        return lo <= n % buckets <= hi

    return test


def _one(spec: Any, kind: str, where: str) -> KeyTest:
    if not isinstance(spec, dict):
        raise FilterError(f"{where}: a filter is a JSON object")
    if kind == "RANGE":
        rng = spec.get("keyRange")
        if not isinstance(rng, dict):
            raise FilterError(f"{where}: a RANGE filter needs keyRange")
        lo, hi = _int(rng, "start", where), _int(rng, "end", where)
        if lo > hi:
            raise FilterError(f"{where}: keyRange start {lo} is after end {hi}")
        return _range_test(lo, hi)
    buckets = _int(spec, "numBuckets", where)
    rng = spec.get("bktRange")
    if buckets < 1 or not isinstance(rng, dict):
        raise FilterError(f"{where}: a MOD filter needs numBuckets >= 1 and bktRange")
    lo, hi = _int(rng, "start", where), _int(rng, "end", where)
    if not 0 <= lo <= hi < buckets:
        raise FilterError(f"{where}: bktRange {lo}..{hi} is not within 0..{buckets - 1}")
    return _mod_test(buckets, lo, hi)


def parse_filters(text: str | None) -> dict[int, KeyTest]:
    """Source id -> key test; empty for no filter. Raises :class:`FilterError`."""
    if not text or not text.strip():
        return {}
    try:
        obj = json.loads(text)
    except ValueError:
        try:
            obj = json.loads(_BARE_KEY.sub(r'\1"\2":', text))
        except ValueError as e:
            raise FilterError(f"filters is not JSON: {e}") from None
    if not isinstance(obj, dict):
        raise FilterError("filters must be a JSON object keyed by source id")
    out: dict[int, KeyTest] = {}
    for src, conf in obj.items():
        try:
            src_id = int(src)
        except ValueError:
            raise FilterError(f"filters: {src!r} is not a source id") from None
        where = f"filters for source {src_id}"
        if not isinstance(conf, dict):
            raise FilterError(f"{where}: must be an object")
        kind = str(conf.get("partitionType", "")).upper()
        if kind not in ("RANGE", "MOD"):
            raise FilterError(f"{where}: partitionType must be RANGE or MOD")
        specs = conf.get("filters")
        if not isinstance(specs, list) or not specs:
            raise FilterError(f"{where}: filters must be a non-empty list")
        tests = [_one(spec, kind, where) for spec in specs]
        out[src_id] = tests[0] if len(tests) == 1 else _any(tests)
    return out


def _any(tests: list[KeyTest]) -> KeyTest:
    return lambda key: any(t(key) for t in tests)
