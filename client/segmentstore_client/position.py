"""Reader positions: small checkpoint objects that serialize to JSON.

A position names a segment and the offset of the next event to read there (always an
event boundary), so a consumer can persist it with its own state and resume later with
``client.reader(segment, offset=position)``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

FORMAT_VERSION: Final = 1


@dataclass(frozen=True, slots=True)
class Position:
    """Where a reader is: the next event to read is at ``offset`` in ``segment``.

    Example::

        text = reader.position.to_json()          # '{"v":1,"segment":"s","offset":4096}'
        reader = client.reader("s", offset=Position.from_json(text))
    """

    segment: str
    offset: int

    def to_json(self) -> str:
        """Serialize as a one-line JSON object.

        Example::

            Position("orders/0", 42).to_json()   # '{"v":1,"segment":"orders/0","offset":42}'
        """
        return json.dumps(self.to_dict(), separators=(",", ":"))

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready dictionary form.

        Example::

            Position("orders/0", 42).to_dict()   # {'v': 1, 'segment': 'orders/0', 'offset': 42}
        """
        return {"v": FORMAT_VERSION, "segment": self.segment, "offset": self.offset}

    @classmethod
    def from_json(cls, text: str | bytes) -> Position:
        """Parse what :meth:`to_json` produced; raises ValueError on anything else.

        Example::

            Position.from_json('{"v":1,"segment":"orders/0","offset":42}').offset   # 42
        """
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"not a position: {e}") from None
        return cls.from_dict(obj)

    @classmethod
    def from_dict(cls, obj: object) -> Position:
        """Build a position from its dictionary form.

        Example::

            Position.from_dict({"v": 1, "segment": "orders/0", "offset": 42})
        """
        if not isinstance(obj, dict):
            raise ValueError("a position is a JSON object")
        if obj.get("v") != FORMAT_VERSION:
            raise ValueError(f"unsupported position format {obj.get('v')!r}")
        segment, offset = obj.get("segment"), obj.get("offset")
        if not isinstance(segment, str) or not isinstance(offset, int) or offset < 0:
            raise ValueError("a position needs a segment name and a non-negative offset")
        return cls(segment, offset)
