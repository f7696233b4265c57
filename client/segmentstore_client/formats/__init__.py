"""Exact event formats of other systems, and the registry that plugs them into the SDK.

One module per format: :mod:`.kafka` (Kafka 0.10 messages and message sets),
:mod:`.events` (namespaced events), :mod:`.databus` (Databus change events). This
package maps a format *name* to a :class:`RecordFormat`: an object that turns one record
into the bytes of one segment event and back, and renders a record as JSON. The SDK takes
a name or an object wherever records are written or read::

    async with client.writer("orders/0", format="kafka") as w:
        await w.write(b"value", key=b"k", timestamp=1_700_000_000_000)
    async for msg in client.reader("orders/0", format="kafka"):
        print(msg.key, msg.value, formats.get("kafka").to_json(msg))

Built-in names: ``kafka`` (one Kafka message per event, magic 1 unless ``magic=0``),
``events`` (one namespaced event per event), ``records`` (this SDK's own envelope,
:mod:`segmentstore_client.records`), ``databus``. Modules are imported when a name is
first asked for, never when this package is imported; :func:`register` adds a name.

A format object must offer ``name``, ``encode(value, key=None, **fields) -> bytes``,
``encode_record(record) -> bytes``, ``decode(payload) -> record``,
``to_dict(record) -> dict`` (JSON-ready) and, to read JSON back, ``from_dict(dict) ->
record``; :class:`RecordFormat` is the base to extend.
"""

from __future__ import annotations

import abc
import importlib
import json
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = ["Columns", "RecordFormat", "get", "names", "register"]


class Columns(NamedTuple):
    """A record as key, value, timestamp (ms since the epoch, or None) and headers."""

    key: bytes | None
    value: bytes | None
    timestamp: int | None
    headers: dict[str, bytes]


class RecordFormat(abc.ABC):
    """Base of a format: subclass it and override :meth:`encode`, :meth:`decode` and
    :meth:`to_dict` (and :meth:`encode_record` when records are not plain bytes).

    Example::

        class Upper(formats.RecordFormat):
            name = "upper"
            def encode(self, value, key=None, **fields): return value.upper()
            def decode(self, payload): return payload
            def to_dict(self, record): return {"value": record.decode()}
        formats.register("upper", Upper)
    """

    name: str = ""

    @abc.abstractmethod
    def encode(self, value: bytes | None, key: bytes | None = None, **fields: Any) -> bytes:
        """The bytes of one record built from its fields."""

    def encode_record(self, record: Any) -> bytes:
        """The bytes of an already built record (as :meth:`decode` returns)."""
        encode = getattr(record, "encode", None)
        if encode is None:
            raise TypeError(f"the {self.name} format cannot encode {type(record).__name__}")
        data: bytes = encode()
        return data

    @abc.abstractmethod
    def decode(self, payload: bytes) -> Any:
        """The record an event holds; a damaged event raises the format's named error."""

    def to_dict(self, record: Any) -> dict[str, Any]:
        d: dict[str, Any] = record.to_dict()
        return d

    def from_dict(self, obj: dict[str, Any]) -> Any:
        """The record a :meth:`to_dict` dict describes (``export`` then ``import json``);
        a ``ValueError`` when it describes none."""
        raise NotImplementedError(f"the {self.name} format cannot read JSON back")

    def columns(self, record: Any) -> Columns:
        """The record as the four columns every format maps to (Spark's
        ``recordFormat``): key, value, timestamp in ms (None if it has none), headers.
        This default reads attributes of those names; formats override it."""
        ts = getattr(record, "timestamp", None)
        headers = getattr(record, "headers", None) or {}
        return Columns(getattr(record, "key", None), getattr(record, "value", None), ts, headers)

    def encode_columns(self, columns: Columns) -> bytes:
        """One record from the four columns (the inverse of :meth:`columns`)."""
        return self.encode(
            columns.value, columns.key, timestamp=columns.timestamp, headers=columns.headers
        )

    def to_json(self, record: Any, **dumps_kwargs: Any) -> str:
        """The JSON rendering of one record."""
        return json.dumps(self.to_dict(record), **dumps_kwargs)

    def __repr__(self) -> str:
        return f"<RecordFormat {self.name}>"


_BUILTIN: dict[str, str] = {
    "kafka": "segmentstore_client.formats._adapters:KafkaFormat",
    "events": "segmentstore_client.formats._adapters:EventsFormat",
    "records": "segmentstore_client.formats._adapters:RecordsFormat",
    "databus": "segmentstore_client.formats._adapters:DatabusFormat",
}
_factories: dict[str, Callable[[], RecordFormat]] = {}
_instances: dict[str, RecordFormat] = {}
_lock = threading.Lock()


def register(name: str, factory: Callable[[], RecordFormat]) -> None:
    """Make ``name`` usable as ``format=name`` (replacing any format of that name).

    Example::

        formats.register("upper", Upper)
    """
    with _lock:
        _factories[name] = factory
        _instances.pop(name, None)


def names() -> list[str]:
    """Every registered format name (without importing any format module)."""
    return sorted({*_BUILTIN, *_factories})


def get(fmt: str | RecordFormat) -> RecordFormat:
    """The format named ``fmt`` (or ``fmt`` itself when it is a format object).

    Unknown names raise ``ValueError`` listing the known ones; a format whose module or
    optional package is missing raises ``ImportError`` naming it.

    Example::

        kafka = formats.get("kafka")
        msg = kafka.decode(kafka.encode(b"v", key=b"k"))
    """
    if not isinstance(fmt, str):
        if not callable(getattr(fmt, "decode", None)) or not callable(getattr(fmt, "encode", None)):
            raise TypeError(f"not a record format: {fmt!r}")
        return fmt
    with _lock:
        inst = _instances.get(fmt)
        if inst is not None:
            return inst
        factory = _factories.get(fmt)
        if factory is None:
            spec = _BUILTIN.get(fmt)
            if spec is None:
                raise ValueError(f"unknown format {fmt!r}; known: {', '.join(names())}")
            module, _, attr = spec.partition(":")
            factory = getattr(importlib.import_module(module), attr)
        inst = _instances[fmt] = factory()
        return inst
