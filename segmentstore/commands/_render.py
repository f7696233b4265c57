"""How the commands show data to people and scripts, and read it back.

Contract: :func:`text_line` renders any payload as exactly one line of printable text
(control and format characters, invalid UTF-8 and backslashes escaped, so terminal escape sequences
in data can do nothing and one event is always one line); :func:`event_json` is the JSON
form shared by ``cat --json``, ``tail --json`` and the ``jsonl`` import/export format,
and :func:`event_from_json` reads it back; :func:`aligned` lays out tables for people.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import json
import re
from collections.abc import Callable, Sequence
from typing import Any, Final

from segmentstore_client import Position, formats

from ._cli import CliError, Exit, printable

_PLAIN: Final = re.compile(rb"[\x20-\x5b\x5d-\x7e]*")  # printable ASCII but the backslash
_ESCAPES: Final[dict[int, str]] = {
    **{c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F)},
    **{c: f"\\u{c:04x}" for c in (*range(0x80, 0xA0), 0x2028, 0x2029)},
    ord("\n"): "\\n",
    ord("\r"): "\\r",
    ord("\t"): "\\t",
}


def text_line(data: bytes) -> str:
    """``data`` as one safe line: UTF-8 text as is, ``\\\\`` for a backslash, ``\\n``,
    ``\\t``, ``\\xNN`` for control characters and bytes that are not UTF-8.

    Example: ``text_line(b"a\\nb\\xff") == "a\\\\nb\\\\xff"``
    """
    if _PLAIN.fullmatch(data):
        return data.decode("ascii")
    text = data.replace(b"\\", b"\\\\").decode("utf-8", "backslashreplace")
    # then format characters (bidi overrides, zero-width), unassigned code points, ...
    return printable(text.translate(_ESCAPES))


def event_dict(offset: int, data: bytes) -> dict[str, Any]:
    """The JSON form of an event: offset, length, next_offset, and ``data`` (UTF-8 text)
    or ``data_b64`` (Base-64, when the payload is not valid UTF-8)."""
    d: dict[str, Any] = {
        "offset": offset,
        "length": len(data),
        "next_offset": offset + 8 + len(data),
    }
    put_bytes(d, "data", data)
    return d


def put_bytes(d: dict[str, Any], name: str, data: bytes) -> None:
    """``d[name]`` = ``data`` as text when it is valid UTF-8, else ``d[name + "_b64"]``."""
    try:
        d[name] = data.decode("utf-8")
    except UnicodeDecodeError:
        d[name + "_b64"] = base64.b64encode(data).decode("ascii")


def event_json(offset: int, data: bytes) -> str:
    """:func:`event_dict` as one JSON line (non-ASCII escaped: safe on any terminal)."""
    return json.dumps(event_dict(offset, data), separators=(",", ":"))


def format_json(name: str, what: str = "") -> Callable[[int, bytes], str]:
    """A renderer of events in the registry's format ``name`` (``cat --format kafka``):
    one JSON line, the record's JSON form with ``offset`` (first) set to the event's
    segment offset. An event that is not ``what`` (default "a valid <name> record") is a
    :class:`CliError` (bad data); a format that cannot load, one (failed)."""
    what = what or f"a valid {name} record"

    def line(offset: int, data: bytes) -> str:
        try:
            fmt = formats.get(name)
        except ImportError as e:
            raise CliError(f"the {name} format is not available: {e}", Exit.FAILED) from None
        try:
            rec = fmt.decode(data)
        except ValueError as e:
            raise CliError(f"event at offset {offset} is not {what}: {e}", Exit.BAD_DATA) from None
        d = {"offset": offset, **fmt.to_dict(rec)}
        d["offset"] = offset  # the segment offset wins over a record's own (Kafka's is 0)
        return json.dumps(d, separators=(",", ":"))

    return line


record_json = format_json("records", "a valid record")
"""A record-envelope event as one JSON line (``--format records``)."""


def event_from_json(line: str | bytes, where: str) -> bytes:
    """The payload of one :func:`event_json` line (other keys are ignored)."""
    try:
        obj = json.loads(line)
        if not isinstance(obj, dict):
            raise ValueError("not a JSON object")
        if isinstance(obj.get("data"), str):
            return str(obj["data"]).encode("utf-8", "surrogatepass")
        if isinstance(obj.get("data_b64"), str):
            return base64.b64decode(obj["data_b64"], validate=True)
        raise ValueError('needs "data" (text) or "data_b64" (Base-64)')
    except (ValueError, binascii.Error) as e:
        raise CliError(f"{where}: not an event: {e}", Exit.BAD_DATA) from None


def parse_from(text: str, segment: str) -> int | str:
    """``--from``: an offset, a position JSON (``{"v":1,"segment":..,"offset":..}`` as
    readers save it), ``start`` or ``end``."""
    text = text.strip()
    if text in ("start", "end"):
        return text
    if text.lstrip("-").isdigit():
        offset = int(text)
        if offset < 0:
            raise CliError(f"--from: offset must not be negative: {offset}", Exit.USAGE)
        return offset
    try:
        pos = Position.from_json(text)
    except ValueError as e:
        raise CliError(
            f"--from: not an offset, 'start', 'end' or position: {e}", Exit.USAGE
        ) from None
    if pos.segment != segment:
        raise CliError(f"--from: the position is for segment {pos.segment!r}", Exit.USAGE)
    return pos.offset


def iso_ms(ms: int) -> str:
    """Milliseconds since the epoch as an ISO-8601 UTC time ("-" for 0 or less)."""
    if ms <= 0:
        return "-"
    t = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


_NUMBER: Final = re.compile(r"-?[\d,]+(\.\d+)?")


def _is_number(cell: object) -> bool:
    if isinstance(cell, bool):
        return False
    return isinstance(cell, int | float) or (
        isinstance(cell, str) and bool(_NUMBER.fullmatch(cell))
    )


def aligned(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A table for people: a header line and one line per row, columns padded to their
    widest cell; numbers right-aligned."""
    cells = [[str(c) for c in headers], *([str(c) for c in row] for row in rows)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    numeric = [bool(rows) and all(_is_number(row[i]) for row in rows) for i in range(len(headers))]
    out = []
    for r in cells:
        parts = [c.rjust(widths[i]) if numeric[i] else c.ljust(widths[i]) for i, c in enumerate(r)]
        out.append("  ".join(parts).rstrip())
    return "\n".join(out)
