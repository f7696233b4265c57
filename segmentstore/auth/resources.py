"""Which permission each wire request needs, on which resources (README "Security").

Contract: ``REQUIRED`` maps every request class the server takes to the permission it
needs; ``touched_segments(command)`` names the segments it acts on; ``segment_resource``
turns a segment name into Pravega's resource name (``prn::/scope:S/stream:T``,
``.../key-value-table:K``, ``.../reader-group:R``). Requests that carry no token field
(Hello, KeepAlive, the append data after a SetupAppend) are not in the table: the append
data rides on the session its SetupAppend was authorized for.
"""

from __future__ import annotations

from typing import Final

from segmentstore_client.protocol import (
    Command,
    CreateSegment,
    CreateTableSegment,
    CreateTransientSegment,
    DeleteSegment,
    DeleteTableSegment,
    FlushToStorage,
    GetSegmentAttribute,
    GetStreamSegmentInfo,
    GetTableSegmentInfo,
    ListStorageChunks,
    LocateOffset,
    MergeSegments,
    MergeSegmentsBatch,
    ReadSegment,
    ReadTable,
    ReadTableEntries,
    ReadTableEntriesDelta,
    ReadTableKeys,
    RemoveTableKeys,
    SealSegment,
    SetupAppend,
    TruncateSegment,
    UpdateSegmentAttribute,
    UpdateSegmentPolicy,
    UpdateTableEntries,
)

from .tokens import Permission

__all__ = ["REQUIRED", "ROOT", "segment_resource", "touched_segments"]

ROOT: Final = "prn::"  # admin-only requests (the store as a whole) are checked against this

R, RU = Permission.READ, Permission.READ_UPDATE
REQUIRED: Final[dict[type[Command], Permission]] = {
    SetupAppend: RU,
    ReadSegment: R,
    GetStreamSegmentInfo: R,
    CreateSegment: RU,
    CreateTransientSegment: RU,
    SealSegment: RU,
    TruncateSegment: RU,
    DeleteSegment: RU,
    UpdateSegmentPolicy: RU,
    MergeSegments: RU,
    MergeSegmentsBatch: RU,
    LocateOffset: R,
    GetSegmentAttribute: R,
    UpdateSegmentAttribute: RU,
    GetTableSegmentInfo: R,
    CreateTableSegment: RU,
    DeleteTableSegment: RU,
    UpdateTableEntries: RU,
    RemoveTableKeys: RU,
    ReadTable: R,
    ReadTableKeys: R,
    ReadTableEntries: R,
    ReadTableEntriesDelta: R,
    FlushToStorage: RU,
    ListStorageChunks: RU,
}


def touched_segments(command: Command) -> tuple[str, ...]:
    """The segment names ``command`` reads or changes (none: the store as a whole)."""
    if isinstance(command, MergeSegments):
        return (command.target, command.source)
    if isinstance(command, MergeSegmentsBatch):
        return (command.target_segment_id, *command.source_segment_ids)
    if isinstance(command, CreateTransientSegment):
        return (command.parent_segment,)
    if isinstance(command, FlushToStorage):
        return ()
    for field in ("segment", "segment_name"):
        name = getattr(command, field, None)
        if isinstance(name, str):
            return (name,)
    return ()


def segment_resource(segment: str) -> str:
    """Pravega's resource name for a segment.

    ``app/orders/0.#epoch.0`` -> ``prn::/scope:app/stream:orders``;
    ``app/_tables/kv/0`` -> ``prn::/scope:app/key-value-table:kv``;
    ``app/_RGgroup/0`` and ``app/group_kvtable/0`` -> ``prn::/scope:app/reader-group:group``;
    a name without ``/`` is a scope of its own.
    """
    parts = segment.split("/")
    scope = parts[0]
    if len(parts) == 1:
        return f"prn::/scope:{scope}"
    second = parts[1]
    if second == "_tables" and len(parts) >= 3:
        return f"prn::/scope:{scope}/key-value-table:{parts[2]}"
    if second.startswith("_RG"):
        return f"prn::/scope:{scope}/reader-group:{second[3:]}"
    if second.endswith("_kvtable"):
        return f"prn::/scope:{scope}/reader-group:{second[: -len('_kvtable')]}"
    return f"prn::/scope:{scope}/stream:{second}"
