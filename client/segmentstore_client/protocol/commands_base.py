"""The base of every wire command: the ``Command`` / ``Reply`` / ``ErrorReply`` classes, the
``@wire`` declaration that compiles a class's spec into its encoder and decoder
(``_compile.py``) and registers it by type code, and the registries the codec uses.

Field order in each class is the *wire* order of the reference (not Java's constructor
order), and each class's ``@wire`` spec names the kind of every field in that order.
Optional trailing fields have the reference's default as their dataclass default. Writers
always emit every field. The commands themselves live in one module per family
(``commands_data``, ``commands_segments``, ``commands_tables``, ``commands_errors``,
``commands_admin``); ``commands.py`` gathers them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar, Literal, TypeVar

from ._compile import Decoder, Encoder, compile_command

Direction = Literal["request", "reply", "both", "inner"]


class Command:
    """Base of every wire command. ``TYPE`` is the wire type code, ``NAME`` the Java enum name."""

    __slots__ = ()
    TYPE: ClassVar[int]
    NAME: ClassVar[str]
    DIRECTION: ClassVar[Direction]
    SPEC: ClassVar[str]
    _encode: ClassVar[Encoder]
    _decode: ClassVar[Decoder]


class Reply(Command):
    """A server-to-client command answering a request (``request_id`` echoes the request's)."""

    __slots__ = ()
    request_id: int


class ErrorReply(Reply):
    """A reply that reports a failure of the request it answers."""

    __slots__ = ()


def _omitted() -> Any:
    """How many optional trailing fields were absent on the wire.

    Only decoding sets it, so that a decoded frame re-encodes byte for byte (the official
    client omits trailing fields, e.g. in CreateTableSegment). Commands built in code
    leave it 0 and are written with every field. It takes no part in equality.
    """
    return dataclasses.field(default=0, compare=False, repr=False, kw_only=True)


COMMAND_TYPES: dict[int, type[Command]] = {}
DECODERS: dict[int, Decoder] = {}
ENCODERS: dict[type[Command], Encoder] = {}

C = TypeVar("C", bound=type[Command])


def wire(type_code: int, name: str, direction: Direction, spec: str) -> Callable[[C], C]:
    def register(cls: C) -> C:
        fields = dataclasses.fields(cls)  # type: ignore[arg-type]
        names = [f.name for f in fields if f.name != "wire_omitted"]
        defaults = {f.name: f.default for f in fields if f.default is not dataclasses.MISSING}
        tracks = any(f.name == "wire_omitted" for f in fields)
        encode, decode = compile_command(cls, type_code, spec, names, defaults, tracks)
        cls.TYPE, cls.NAME, cls.DIRECTION, cls.SPEC = type_code, name, direction, spec
        cls._encode = staticmethod(encode)  # type: ignore[assignment]
        cls._decode = staticmethod(decode)  # type: ignore[assignment]
        if type_code in COMMAND_TYPES:
            raise TypeError(f"type code {type_code} registered twice")
        COMMAND_TYPES[type_code] = cls
        DECODERS[type_code] = decode
        ENCODERS[cls] = encode
        return cls

    return register


def command_for_type(type_code: int) -> type[Command] | None:
    """The command class registered for a wire type code, or None if it is unknown."""
    return COMMAND_TYPES.get(type_code)


def _all_commands() -> dict[str, Any]:
    return {cls.__name__: cls for cls in COMMAND_TYPES.values()}
