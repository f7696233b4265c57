"""Hypothesis strategies for every wire command, derived from each class's ``SPEC``.

A command's ``SPEC`` names the wire kind of every dataclass field in order, so one
strategy per kind gives a strategy per command with no per-class code: a new command
is covered as soon as it is registered.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from hypothesis import strategies as st
from segmentstore_client.protocol import (
    ChunkInfo,
    Command,
    ConditionalAttributeUpdate,
    TableEntry,
    TableIteratorArgs,
    TableKey,
)

I64_MIN, I64_MAX = -(2**63), 2**63 - 1
I32_MIN, I32_MAX = -(2**31), 2**31 - 1

i8 = st.integers(-128, 127)
i32 = st.integers(I32_MIN, I32_MAX) | st.sampled_from([I32_MIN, -1, 0, I32_MAX])
i64 = st.integers(I64_MIN, I64_MAX) | st.sampled_from([I64_MIN, -1, 0, 1, I64_MAX])

# Characters whose modified-UTF-8 form is special: NUL (C0 80), the 2- and 3-byte edges,
# supplementary characters (two 3-byte surrogate halves). Lone surrogates are left out on
# purpose: Java strings cannot tell "\ud83d" "\ude00" from U+1F600, so neither can we.
SPECIAL_CHARS = [
    "\x00",
    "\x7f",
    "\x80",
    "é",
    "\u07ff",
    "\u0800",
    "€",
    "\ud7ff",
    "\ue000",
    "\uffff",
    "\U00010000",
    "\U0001f600",
    "\U0010ffff",
]
_char = st.characters(exclude_categories=["Cs"]) | st.sampled_from(SPECIAL_CHARS)
short_text = st.text(max_size=24) | st.text(_char, max_size=24)

# Strings up to the 65535-byte limit: a repeated character of known encoded size.
_UNIT_SIZES = [("a", 1), ("é", 2), ("\x00", 2), ("€", 3), ("\U0001f600", 6)]
big_text = st.sampled_from(_UNIT_SIZES).flatmap(
    lambda cs: st.integers(0, 65535 // cs[1]).map(lambda n: cs[0] * n)
)


def _sometimes(common: st.SearchStrategy[Any], rare: st.SearchStrategy[Any]) -> Any:
    """``rare`` about one draw in twenty (it is slow), ``common`` otherwise."""
    return st.integers(0, 19).flatmap(lambda i: rare if i == 0 else common)


text = _sometimes(short_text, big_text)

# Byte strings: short ones from hypothesis, and large ones (up to 300 KiB, beyond the
# decoder's 64 KiB big-frame threshold) made from a seed, since hypothesis' own buffer
# is far smaller than that.
big_binary = st.builds(
    lambda n, seed: random.Random(seed).randbytes(n), st.integers(0, 300_000), st.integers()
)
binary = _sometimes(st.binary(max_size=64), big_binary)
key_bytes = st.binary(min_size=1, max_size=32)  # empty keys have their own test

table_key = st.builds(TableKey, key_bytes, i64)
table_entry = st.builds(TableEntry, key_bytes, st.binary(max_size=32), i64)
table_entries = st.lists(table_entry, max_size=8).map(tuple)
table_keys = st.lists(table_key, max_size=8).map(tuple)
iterator_args = st.builds(
    TableIteratorArgs,
    st.binary(max_size=16),
    st.binary(max_size=4),
    st.binary(max_size=16),
    st.binary(max_size=16),
)
attribute_update = st.builds(ConditionalAttributeUpdate, st.uuids(), i8, i64, i64)
chunk_info = st.builds(ChunkInfo, i64, i64, i64, short_text, st.booleans())

KIND_STRATEGIES: dict[str, st.SearchStrategy[Any]] = {
    "i8": i8,
    "bool": st.booleans(),
    "i32": i32,
    "i64": i64,
    "uuid": st.uuids(),
    "i64?": i64,
    "i32?": i32,
    "bool?": st.booleans(),
    "i64+": i64,
    "str": text,
    "str?": text,
    "bytes": binary,
    "tail": binary,
    "longs": st.lists(i64, max_size=16).map(tuple),
    "strs": st.lists(short_text, max_size=8).map(tuple),
    "entries": table_entries,
    "keys": table_keys,
    "itargs": iterator_args,
    "caus": st.lists(attribute_update, max_size=4).map(tuple),
    "caus?": st.lists(attribute_update, max_size=4).map(tuple),
    "chunks": st.lists(chunk_info, max_size=4).map(tuple),
    "pairs": st.lists(st.tuples(short_text, i64), max_size=6).map(tuple),
    "event": binary,
    "padding": st.integers(0, 100_000),
}


def wire_field_names(cls: type[Command]) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if f.name != "wire_omitted"]  # type: ignore[arg-type]


def command_strategy(cls: type[Command]) -> st.SearchStrategy[Command]:
    """Commands of class ``cls`` with every field drawn from the strategy of its wire kind."""
    kinds = cls.SPEC.split()
    names = wire_field_names(cls)
    assert len(kinds) == len(names), cls
    return st.builds(cls, *[KIND_STRATEGIES[k] for k in kinds])
