"""Stream cuts: a position in a stream, one offset per segment, serialisable to JSON.

Contract: a :class:`StreamCut` is immutable: ``stream`` is ``"scope/stream"`` and
``positions`` maps segment ids (Pravega's ``epoch << 32 | number``) to byte offsets at
event boundaries. ``to_json``/``from_json`` round-trip exactly; ``from_json`` of anything
that is not a cut raises ``ValueError`` with one line saying why. No I/O here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

_FORMAT = "segmentstore.streamcut/1"


@dataclass(frozen=True, slots=True)
class StreamCut:
    """Where a stream is cut: segment id -> offset.

    Example::

        cut = await client.stream_info("shop/orders").tail
        saved = cut.to_json()
        again = StreamCut.from_json(saved)
    """

    stream: str
    positions: Mapping[int, int] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": _FORMAT,
                "stream": self.stream,
                "positions": {str(s): o for s, o in sorted(self.positions.items())},
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> StreamCut:
        try:
            doc: Any = json.loads(text)
        except ValueError as e:
            raise ValueError(f"not a stream cut: {e}") from None
        if not isinstance(doc, dict) or doc.get("format") != _FORMAT:
            raise ValueError(f"not a stream cut (no format {_FORMAT!r})")
        stream, positions = doc.get("stream"), doc.get("positions")
        if not isinstance(stream, str) or not isinstance(positions, dict):
            raise ValueError("not a stream cut: needs 'stream' and 'positions'")
        out: dict[int, int] = {}
        for k, v in positions.items():
            if not (isinstance(k, str) and k.lstrip("-").isdigit()) or type(v) is not int or v < 0:
                raise ValueError(f"not a stream cut: bad position {k!r}: {v!r}")
            out[int(k)] = v
        return cls(stream, out)

    def __hash__(self) -> int:
        return hash((self.stream, tuple(sorted(self.positions.items()))))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StreamCut):
            return NotImplemented
        return self.stream == other.stream and dict(self.positions) == dict(other.positions)
