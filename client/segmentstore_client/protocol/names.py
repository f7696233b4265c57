"""The one rule for segment names, shared by the SDK (checked before sending) and the
server (checked before creating).

A name is any string the wire can carry (Java ``writeUTF``: modified UTF-8, at most
65,535 bytes; lone surrogates are legal there and stay legal here), except:

* the empty string,
* names whose encoded form leaves no room in a reply that repeats the name
  (``MAX_NAME_BYTES``),
* control characters (U+0000-U+001F and U+007F), which no Pravega client puts in a
  name and which make logs, metrics labels and file listings ambiguous.

Everything that stores or prints a name encodes it with ``encode_name`` (UTF-8 with
``surrogatepass``), so a name the wire accepts can always be written to the log, the
checkpoint and a metrics label, and read back equal.
"""

from __future__ import annotations

import re
from typing import Final

# Replies such as SegmentAlreadyExists carry the name next to a request id and a server
# stack-trace string; keep a margin so every reply that names the segment still encodes.
MAX_NAME_BYTES: Final = 32 * 1024

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class InvalidName(ValueError):
    """A segment name that the store refuses; the message says which name and why."""


def encode_name(name: str) -> bytes:
    """The bytes a name is stored as everywhere off the wire (UTF-8, surrogates kept)."""
    return name.encode("utf-8", "surrogatepass")


def decode_name(raw: bytes) -> str:
    """Inverse of ``encode_name``."""
    return raw.decode("utf-8", "surrogatepass")


def wire_length(name: str) -> int:
    """Bytes of ``name`` in modified UTF-8 (without the u16 length prefix)."""
    if name.isascii():
        return len(name) + name.count("\x00")
    n = 0
    for ch in name:
        c = ord(ch)
        n += 1 if 0 < c < 0x80 else 2 if c < 0x800 else 3 if c < 0x10000 else 6
    return n


def name_problem(name: str) -> str | None:
    """Why ``name`` is refused, or None when it is a valid segment name."""
    if not name:
        return "a segment name cannot be empty"
    m = _CONTROL.search(name)
    if m is not None:
        return f"control character U+{ord(m.group()):04X} at position {m.start()}"
    if wire_length(name) > MAX_NAME_BYTES:
        return f"the name is longer than {MAX_NAME_BYTES} bytes on the wire"
    return None


def check_name(name: str) -> str:
    """Return ``name`` unchanged, or raise ``InvalidName`` saying which name and why."""
    problem = name_problem(name)
    if problem is not None:
        shown = name if len(name) <= 80 else name[:77] + "..."
        raise InvalidName(f"invalid segment name {shown!r}: {problem}")
    return name


# A ReadTableKeys on this virtual table lists segment names (segmentstore's extension:
# the wire has no listing request). Keys are names (``encode_name``) in byte order,
# ``TableIteratorArgs.prefix_filter`` restricts them to a prefix, and the continuation
# token is the last name of the page. The name is reserved: no table of this name exists.
SEGMENT_LISTING_TABLE: Final = "_system/_segments"
