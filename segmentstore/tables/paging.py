# Pages of a table's keys or entries (ReadTableKeys / ReadTableEntries, reference 10.3).
#
# Contract. Pure functions over an in-memory TableState: no I/O, no await. A page holds keys
# in ascending unsigned byte order after the continuation token's key, within [from_key,
# to_key] on fixed-key tables, and stops at ``limit`` keys or once its keys (and values)
# take MAX_REPLY_BYTES on the wire. A continuation token is ``TOKEN_VERSION | last key``, so
# it survives updates and restarts; an empty page has an empty token (the end).
from __future__ import annotations

from typing import Final

from .errors import IllegalTableArgument
from .index import Entry, TableState
from .records import MAX_KEY_LENGTH

Buffer = bytes | bytearray | memoryview

# A reply stops growing once its keys and values take this much (Java: ~2 MiB).
MAX_REPLY_BYTES: Final = 2 * 1024 * 1024
TOKEN_VERSION: Final = 1


def wire_key_size(key: bytes) -> int:
    return 16 + len(key)


def wire_value_size(length: int) -> int:
    return 8 + length


def page(
    t: TableState,
    limit: int,
    token: Buffer,
    from_key: Buffer,
    to_key: Buffer,
    with_values: bool,
) -> tuple[list[tuple[bytes, Entry]], bytes]:
    """One page of ``(key, index entry)`` and the token of the next page."""
    name = t.name
    if t.key_length:
        low = range_key(t, from_key, "fromKey")
        high = range_key(t, to_key, "toKey")
    elif len(from_key) or len(to_key):
        raise IllegalTableArgument(name, "key ranges need a fixed-key-length table")
    else:
        low = high = None
    after: bytes | None = None
    if len(token):
        tok = bytes(token)
        if tok[0] != TOKEN_VERSION or not 1 <= len(tok) - 1 <= MAX_KEY_LENGTH:
            raise IllegalTableArgument(name, "not a continuation token of this server")
        after = tok[1:]
    out: list[tuple[bytes, Entry]] = []
    if limit <= 0:
        return out, b""
    index = t.index
    size = 0
    for key in t.sorted_keys().irange(after, low, high):
        if len(out) >= limit or size >= MAX_REPLY_BYTES:
            break
        entry = index[key]
        out.append((key, entry))
        size += wire_key_size(key)
        if with_values:
            stored = entry[1]
            size += wire_value_size(stored if isinstance(stored, int) else len(stored))
    if not out:
        return out, b""
    return out, bytes((TOKEN_VERSION,)) + out[-1][0]


def range_key(t: TableState, key: Buffer, what: str) -> bytes | None:
    if not len(key):
        return None
    if len(key) != t.key_length:
        raise IllegalTableArgument(
            t.name, f"{what} has {len(key)} bytes, the table's keys have {t.key_length}"
        )
    return bytes(key)
