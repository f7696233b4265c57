"""Compile a command's wire spec into specialised encode/decode functions.

Every command declares its payload as a space-separated list of field kinds, in wire
order, matching its dataclass fields one to one (see ``commands_base.py``). This module turns
that spec into straight-line Python: runs of fixed-size fields become one precompiled
``struct.Struct`` call, and the frame header is packed together with the first run. The
result is as fast as hand-written code with a single source of truth per command.

Field kinds
  i8 bool i32 i64 uuid   fixed size, mandatory
  i64? i32? bool?        optional trailing field, present if >= its size remains
  i64+                   optional trailing i64, present if *any* byte remains (the ">0" rule)
  str  str?              Java writeUTF string; ``str?`` present if any byte remains
  bytes tail             i32-length-prefixed bytes; bytes running to the end of the payload
  longs strs             i32 count + i64s / strings
  entries keys itargs    TableEntries, list<TableKey>, TableIteratorArgs
  caus caus?             list<ConditionalAttributeUpdate> (``caus?``: the ">0" rule)
  chunks pairs           list<ChunkInfo>; (source str, offset i64) pairs of SegmentsBatchMerged
  event padding          embedded Event record (type 0 + length + data); n zero bytes
"""

from __future__ import annotations

import struct
import types
from collections.abc import Callable, Container
from typing import Any

from . import _fields
from .primitives import _UUID_CACHE, HEADER, I32, I64

Encoder = Callable[[Any], bytes]
Decoder = Callable[[memoryview, bool], Any]

_FIXED = {"i8": "b", "bool": "?", "i32": "i", "i64": "q", "uuid": "16s"}
_OPTIONAL_FIXED = {"i64?": ("q", 8), "i32?": ("i", 4), "bool?": ("?", 1), "i64+": ("q", 0)}
_COMPLEX = {
    "str",
    "bytes",
    "tail",
    "longs",
    "strs",
    "entries",
    "keys",
    "itargs",
    "caus",
    "chunks",
    "pairs",
    "event",
    "padding",
}


def compile_command(
    cls: type,
    type_code: int,
    spec: str,
    names: list[str],
    defaults: dict[str, Any],
    tracks_omitted: bool = False,
) -> tuple[Encoder, Decoder]:
    kinds = spec.split()
    optional = [k for k in kinds if k in _OPTIONAL_FIXED or k in ("str?", "caus?")]
    if bool(optional) != tracks_omitted:
        raise TypeError(f"{cls.__name__}: optional fields need a wire_omitted field")
    if len(kinds) != len(names):
        raise TypeError(f"{cls.__name__}: spec has {len(kinds)} fields, class has {len(names)}")
    for k in kinds:
        known = k in _FIXED or k in _OPTIONAL_FIXED or k in _COMPLEX or k in ("str?", "caus?")
        if not known:
            raise TypeError(f"{cls.__name__}: unknown field kind {k!r}")
    ns: dict[str, Any] = {
        "cls": cls,
        "T": type_code,
        "HDR": HEADER,
        "I32": I32,
        "I64": I64,
        "F": _fields,
        "_uuid": _fields.uuid_from_bytes,
        "UC": _UUID_CACHE,
        "_wstr": _fields.encode_str,
    }
    return (
        _gen_encoder(cls, kinds, names, ns),
        _gen_decoder(cls, kinds, names, defaults, ns, tracks_omitted),
    )


def _runs(kinds: list[str], fixed: Container[str] = _FIXED) -> list[tuple[str, list[int]]]:
    """Group consecutive kinds in ``fixed`` into "fixed" runs; every other field is its
    own run. The encoder counts optional fixed-size fields as fixed (it writes every
    field); the decoder does not (their presence depends on the bytes left)."""
    runs: list[tuple[str, list[int]]] = []
    for i, k in enumerate(kinds):
        if k in fixed and runs and runs[-1][0] == "fixed":
            runs[-1][1].append(i)
        elif k in fixed:
            runs.append(("fixed", [i]))
        else:
            runs.append((k, [i]))
    return runs


_WRITE_FIXED = {**_FIXED, **{k: fmt for k, (fmt, _) in _OPTIONAL_FIXED.items()}}


def _value_expr(kind: str, name: str) -> str:
    return f"c.{name}.bytes" if kind == "uuid" else f"c.{name}"


def _gen_encoder(cls: type, kinds: list[str], names: list[str], ns: dict[str, Any]) -> Encoder:
    lines = ["def encode(c):"]
    parts: list[str] = []  # expressions joined after the header
    const = 0
    var_lens: list[str] = []
    head_struct: str | None = None
    head_args: list[str] = []
    optional_lens: list[str] = []  # byte length of each optional field, in wire order
    for ri, (kind, idxs) in enumerate(_runs(kinds, _WRITE_FIXED)):
        if kind == "fixed":
            fmt = ">" + "".join(_WRITE_FIXED[kinds[i]] for i in idxs)
            args = [_value_expr(kinds[i], names[i]) for i in idxs]
            const += struct.calcsize(fmt)
            for i in idxs:
                if kinds[i] in _OPTIONAL_FIXED:
                    optional_lens.append(str(struct.calcsize(">" + _WRITE_FIXED[kinds[i]])))
            if ri == 0:
                head_struct = f"S{ri}"
                ns[head_struct] = struct.Struct(">ii" + fmt[1:])
                head_args = args
            else:
                ns[f"S{ri}"] = struct.Struct(fmt)
                parts.append(f"S{ri}.pack({', '.join(args)})")
            continue
        name = names[idxs[0]]
        if kind == "bytes":
            lines.append(f"    d{ri} = c.{name}")
            parts.append(f"I32.pack(len(d{ri}))")
            parts.append(f"d{ri}")
            const += 4
            var_lens.append(f"len(d{ri})")
        elif kind == "tail":
            lines.append(f"    d{ri} = c.{name}")
            parts.append(f"d{ri}")
            var_lens.append(f"len(d{ri})")
        else:
            writer = "_wstr" if kind in ("str", "str?") else f"F.write_{kind.rstrip('?')}"
            lines.append(f"    x{ri} = {writer}(c.{name})")
            parts.append(f"x{ri}")
            var_lens.append(f"len(x{ri})")
            if kind.endswith("?"):
                optional_lens.append(f"len(x{ri})")
    length = " + ".join([str(const), *var_lens])
    if head_struct is not None:
        head = f"{head_struct}.pack(T, {length}, {', '.join(head_args)})"
    else:
        head = f"HDR.pack(T, {length})"
    full = f"b''.join(({head}, {', '.join(parts)}))" if parts else head
    if optional_lens:
        # A decoded frame that lacked trailing optional fields is re-encoded without them.
        lines.append("    om = c.wire_omitted")
        lines.append("    if om:")
        lines.append(f"        opt = ({', '.join(optional_lens)},)")
        lines.append(f"        return F.drop_tail({full}, sum(opt[len(opt) - om :]))")
    lines.append(f"    return {full}")
    encoder: Encoder = _exec(cls, "encode", lines, ns)
    return encoder


def _gen_decoder(
    cls: type,
    kinds: list[str],
    names: list[str],
    defaults: dict[str, Any],
    ns: dict[str, Any],
    tracks_omitted: bool,
) -> Decoder:
    lines = ["def decode(mv, view):", "    p = 0", "    end = len(mv)", "    om = 0"]
    runs = _runs(kinds)
    for ri, (kind, idxs) in enumerate(runs):
        if kind == "fixed":
            fmt = ">" + "".join(_FIXED[kinds[i]] for i in idxs)
            targets = [f"v{i}" for i in idxs]
            if ri + 1 < len(runs) and runs[ri + 1][0] == "bytes":
                # The byte array's length prefix is read with the fields before it.
                fmt += "i"
                targets.append(f"n{runs[ri + 1][1][0]}")
            ns[f"D{ri}"] = s = struct.Struct(fmt)
            lines.append(f"    {', '.join(targets)}, = D{ri}.unpack_from(mv, p)")
            lines.append(f"    p += {s.size}")
            for i in idxs:
                if kinds[i] == "uuid":  # writer ids repeat: the cache first, no call
                    lines.append(f"    v{i} = UC.get(v{i}) or _uuid(v{i})")
            continue
        i = idxs[0]
        if kind == "bytes":  # inline: i32 length + that many bytes (F.read_bytes)
            if ri == 0 or runs[ri - 1][0] != "fixed":
                lines.append(f"    n{i}, = I32.unpack_from(mv, p)")
                lines.append("    p += 4")
            lines.append(f"    e = p + n{i}")
            lines.append(f"    if n{i} < 0 or e > end:")
            lines.append(f"        raise F.span_error(n{i}, 'byte array')")
            lines.append(f"    v{i} = mv[p:e] if view else bytes(mv[p:e])")
            lines.append("    p = e")
            continue
        if kind in _OPTIONAL_FIXED or kind in ("str?", "caus?"):
            ns[f"dflt{i}"] = defaults[names[i]]
            if kind in _OPTIONAL_FIXED:
                fmt, size = _OPTIONAL_FIXED[kind]
                ns[f"D{ri}"] = struct.Struct(">" + fmt)
                cond = f"end - p >= {size}" if size else "end - p > 0"
                read = f"v{i}, = D{ri}.unpack_from(mv, p); p += {struct.calcsize('>' + fmt)}"
            else:
                cond = "end - p > 0"
                read = f"v{i}, p = F.read_{kind.rstrip('?')}(mv, p, view)"
            lines.append(f"    if {cond}:")
            lines.append(f"        {read}")
            lines.append("    else:")
            lines.append(f"        v{i} = dflt{i}")
            lines.append("        om += 1")
        elif kind == "tail":
            lines.append(f"    v{i} = mv[p:] if view else bytes(mv[p:])")
            lines.append("    p = end")
        else:
            lines.append(f"    v{i}, p = F.read_{kind}(mv, p, view)")
    fields = [*names, "wire_omitted"] if tracks_omitted else list(names)
    values = [f"v{i}" for i in range(len(kinds))] + (["om"] if tracks_omitted else [])
    slots = [getattr(cls, f, None) for f in fields]
    if hasattr(cls, "__post_init__") or not all(
        isinstance(d, types.MemberDescriptorType) for d in slots
    ):
        args = values[: len(kinds)] + (["wire_omitted=om"] if tracks_omitted else [])
        lines.append(f"    return cls({', '.join(args)})")
    else:
        # Fill the slots directly: a frozen dataclass's __init__ goes through
        # object.__setattr__ once per field and costs twice as much. The values are
        # complete and typed by the spec, so __init__ has nothing else to do.
        ns["NEW"] = object.__new__
        lines.append("    o = NEW(cls)")
        for k, (d, v) in enumerate(zip(slots, values, strict=True)):
            ns[f"SET{k}"] = d.__set__  # type: ignore[union-attr]
            lines.append(f"    SET{k}(o, {v})")
        lines.append("    return o")
    decoder: Decoder = _exec(cls, "decode", lines, ns)
    return decoder


def _exec(cls: type, name: str, lines: list[str], ns: dict[str, Any]) -> Any:
    source = "\n".join(lines) + "\n"
    code = compile(source, f"<{cls.__name__}.{name}>", "exec")
    local: dict[str, Any] = {}
    exec(code, ns, local)
    fn = local[name]
    fn.__qualname__ = f"{cls.__name__}.{name}"
    fn.__source__ = source  # kept for debugging: print(SomeCommand._decode.__source__)
    return fn
