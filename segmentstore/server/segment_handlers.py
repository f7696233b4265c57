"""Handlers for segment management and attribute requests (reference 6.4, 6.5, 9).

Each handler is ``async (ctx, request) -> reply``; storage errors it lets through become
the reference's error replies in the connection (``errors.error_reply``).
"""

from __future__ import annotations

import time
from collections import OrderedDict

from segmentstore_client.protocol import (
    CreateSegment,
    DeleteSegment,
    ErrorMessage,
    FlushToStorage,
    GetSegmentAttribute,
    GetStreamSegmentInfo,
    ListStorageChunks,
    LocateOffset,
    MergeSegments,
    MergeSegmentsBatch,
    NoSuchSegment,
    OffsetLocated,
    OperationUnsupported,
    Reply,
    SealSegment,
    SegmentAttribute,
    SegmentAttributeUpdated,
    SegmentCreated,
    SegmentDeleted,
    SegmentIsSealed,
    SegmentIsTruncated,
    SegmentPolicyUpdated,
    SegmentsBatchMerged,
    SegmentSealed,
    SegmentsMerged,
    SegmentTruncated,
    StorageFlushed,
    StreamSegmentInfo,
    TruncateSegment,
    UpdateSegmentAttribute,
    UpdateSegmentPolicy,
)

from ..storage import (
    CREATION_TIME,
    NULL_ATTRIBUTE_VALUE,
    ROLLOVER_SIZE,
    SCALE_POLICY_RATE,
    SCALE_POLICY_TYPE,
    SEGMENT_TYPE_TABLE,
    AttributeUpdate,
    AttributeUpdateType,
    BadAttributeUpdate,
    InvalidOffset,
    SegmentNotFound,
)
from .context import HandlerTable, ServerContext
from .errors import ILLEGAL_ARGUMENT

# Sources merged recently, so that a retried MergeSegments is answered as a success with
# the target's length (reference 6.4) instead of NoSuchSegment. Bounded, newest kept.
_MERGED: OrderedDict[str, str] = OrderedDict()
_MERGED_MAX = 10_000


def _remember_merge(source: str, target: str) -> None:
    _MERGED[source] = target
    _MERGED.move_to_end(source)
    while len(_MERGED) > _MERGED_MAX:
        _MERGED.popitem(last=False)


def _table_refusal(
    ctx: ServerContext, request_id: int, operation: str, *names: str
) -> Reply | None:
    """OperationUnsupported if any of ``names`` is a table segment: raw appends, merges or
    truncation would corrupt its entry log, which only the table layer may write."""
    for name in names:
        if ctx.store.exists(name) and ctx.store.info(name).segment_type & SEGMENT_TYPE_TABLE:
            return OperationUnsupported(request_id, f"{operation} on table segment {name}", "")
    return None


async def get_info(ctx: ServerContext, cmd: GetStreamSegmentInfo) -> Reply:
    info = ctx.store.info(cmd.segment_name)
    return StreamSegmentInfo(
        cmd.request_id,
        cmd.segment_name,
        True,
        info.sealed,
        info.deleted,
        info.last_modified_ms,
        info.length,
        info.start_offset,
    )


async def create_segment(ctx: ServerContext, cmd: CreateSegment) -> Reply:
    await ctx.store.create_segment(
        cmd.segment,
        attributes={
            SCALE_POLICY_TYPE: cmd.scale_type,
            SCALE_POLICY_RATE: cmd.target_rate,
            ROLLOVER_SIZE: max(0, cmd.rollover_size_bytes),
            CREATION_TIME: int(time.time() * 1000),
        },
    )
    return SegmentCreated(cmd.request_id, cmd.segment)


async def seal_segment(ctx: ServerContext, cmd: SealSegment) -> Reply:
    await ctx.store.seal(cmd.segment)
    return SegmentSealed(cmd.request_id, cmd.segment)


async def truncate_segment(ctx: ServerContext, cmd: TruncateSegment) -> Reply:
    refusal = _table_refusal(ctx, cmd.request_id, "truncateSegment", cmd.segment)
    if refusal is not None:
        return refusal
    try:
        await ctx.store.truncate(cmd.segment, cmd.truncation_offset)
    except InvalidOffset:
        start = ctx.store.info(cmd.segment).start_offset
        return SegmentIsTruncated(cmd.request_id, cmd.segment, start, "", cmd.truncation_offset)
    return SegmentTruncated(cmd.request_id, cmd.segment)


async def delete_segment(ctx: ServerContext, cmd: DeleteSegment) -> Reply:
    await ctx.store.delete(cmd.segment)
    ctx.tables.forget(cmd.segment)
    return SegmentDeleted(cmd.request_id, cmd.segment)


async def update_policy(ctx: ServerContext, cmd: UpdateSegmentPolicy) -> Reply:
    if ctx.store.info(cmd.segment).sealed:
        return SegmentIsSealed(cmd.request_id, cmd.segment, "", -1)
    await ctx.store.update_attributes(
        cmd.segment,
        [
            AttributeUpdate(SCALE_POLICY_TYPE, AttributeUpdateType.REPLACE, cmd.scale_type),
            AttributeUpdate(SCALE_POLICY_RATE, AttributeUpdateType.REPLACE, cmd.target_rate),
        ],
    )
    return SegmentPolicyUpdated(cmd.request_id, cmd.segment)


async def merge_segments(ctx: ServerContext, cmd: MergeSegments) -> Reply:
    store = ctx.store
    refusal = _table_refusal(ctx, cmd.request_id, "mergeSegments", cmd.target, cmd.source)
    if refusal is not None:
        return refusal
    if not store.exists(cmd.source) and _MERGED.get(cmd.source) == cmd.target:
        return SegmentsMerged(cmd.request_id, cmd.target, cmd.source, store.info(cmd.target).length)
    known = {t.value for t in AttributeUpdateType}
    for wire_update in cmd.attribute_updates:
        if wire_update.update_type not in known:
            why = (
                f"unknown attribute update type {wire_update.update_type}"
                f" for attribute {wire_update.attribute_id}"
            )
            return ErrorMessage(cmd.request_id, cmd.source, why, ILLEGAL_ARGUMENT)
    updates = [
        AttributeUpdate(
            u.attribute_id, AttributeUpdateType(u.update_type), u.new_value, u.old_value
        )
        for u in cmd.attribute_updates
    ]
    # Check the conditions first so that a failed condition leaves both segments alone.
    for u in updates:
        current = store.get_attribute(cmd.target, u.attribute_id)
        if u.update_type == AttributeUpdateType.REPLACE_IF_EQUALS and current != u.compare_value:
            return SegmentAttributeUpdated(cmd.request_id, False)
    length = await store.merge(cmd.target, cmd.source)
    _remember_merge(cmd.source, cmd.target)
    if updates:
        try:
            await store.update_attributes(cmd.target, updates)
        except BadAttributeUpdate:
            return SegmentAttributeUpdated(cmd.request_id, False)
    return SegmentsMerged(cmd.request_id, cmd.target, cmd.source, length)


async def merge_batch(ctx: ServerContext, cmd: MergeSegmentsBatch) -> Reply:
    store, target = ctx.store, cmd.target_segment_id
    refusal = _table_refusal(
        ctx, cmd.request_id, "mergeSegmentsBatch", target, *cmd.source_segment_ids
    )
    if refusal is not None:
        return refusal
    results: list[tuple[str, int]] = []
    for source in cmd.source_segment_ids:
        if not store.exists(source):
            # Already merged or gone: counts as success (reference 6.4).
            results.append((source, store.info(target).length))
            continue
        length = await store.merge(target, source)
        _remember_merge(source, target)
        results.append((source, length))
    return SegmentsBatchMerged(cmd.request_id, target, tuple(results))


async def locate_offset(ctx: ServerContext, cmd: LocateOffset) -> Reply:
    # Any event boundary >= target is a valid answer; the segment's length always is one.
    # We keep no per-append index, so we give the length (see README, protocol table).
    return OffsetLocated(cmd.request_id, cmd.segment, ctx.store.info(cmd.segment).length)


async def get_attribute(ctx: ServerContext, cmd: GetSegmentAttribute) -> Reply:
    value = ctx.store.get_attribute(cmd.segment_name, cmd.attribute_id)
    return SegmentAttribute(cmd.request_id, value)


async def update_attribute(ctx: ServerContext, cmd: UpdateSegmentAttribute) -> Reply:
    if ctx.store.info(cmd.segment_name).sealed:
        return SegmentIsSealed(cmd.request_id, cmd.segment_name, "", -1)
    update = AttributeUpdate(
        cmd.attribute_id, AttributeUpdateType.REPLACE_IF_EQUALS, cmd.new_value, cmd.expected_value
    )
    try:
        await ctx.store.update_attributes(cmd.segment_name, [update])
    except BadAttributeUpdate:
        return SegmentAttributeUpdated(cmd.request_id, False)
    return SegmentAttributeUpdated(cmd.request_id, True)


async def flush_to_storage(ctx: ServerContext, cmd: FlushToStorage) -> Reply:
    # Every acknowledged append is already durable in the log, which is this server's
    # durable storage; copying to chunk files is an internal detail.
    return StorageFlushed(cmd.request_id)


async def list_storage_chunks(ctx: ServerContext, cmd: ListStorageChunks) -> Reply:
    if not ctx.store.exists(cmd.segment):
        return NoSuchSegment(cmd.request_id, cmd.segment, "", -1)
    return OperationUnsupported(cmd.request_id, "listStorageChunks", "")


SEGMENT_HANDLERS: HandlerTable = {
    GetStreamSegmentInfo: get_info,
    CreateSegment: create_segment,
    SealSegment: seal_segment,
    TruncateSegment: truncate_segment,
    DeleteSegment: delete_segment,
    UpdateSegmentPolicy: update_policy,
    MergeSegments: merge_segments,
    MergeSegmentsBatch: merge_batch,
    LocateOffset: locate_offset,
    GetSegmentAttribute: get_attribute,
    UpdateSegmentAttribute: update_attribute,
    FlushToStorage: flush_to_storage,
    ListStorageChunks: list_storage_chunks,
}

__all__ = ["NULL_ATTRIBUTE_VALUE", "SEGMENT_HANDLERS", "SegmentNotFound"]
