"""Listing segments: a ReadTableKeys on the virtual table ``SEGMENT_LISTING_TABLE``.

Contract: the wire protocol has no request that lists segments, so the listing rides on
an existing extensible one (see ``protocol/names.py``). The reply's keys are segment
names (``encode_name``) in byte order, only those starting with the request's
``prefix_filter``, at most ``suggested_key_count`` (capped) per page, each with version 0;
the continuation token is the last name of a full page, and an empty page ends the
listing. Every other ReadTableKeys goes to the table handler unchanged.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Final

from segmentstore_client.protocol import ReadTableKeys, Reply, TableKey, TableKeysRead
from segmentstore_client.protocol.names import SEGMENT_LISTING_TABLE, encode_name

from .context import HandlerTable, ServerContext
from .table_handlers import read_table_keys

MAX_PAGE: Final = 10_000


async def read_table_keys_or_listing(ctx: ServerContext, cmd: ReadTableKeys) -> Reply:
    if cmd.segment != SEGMENT_LISTING_TABLE:
        return await read_table_keys(ctx, cmd)
    prefix = bytes(cmd.args.prefix_filter)
    after = bytes(cmd.args.continuation_token)
    count = max(1, min(cmd.suggested_key_count, MAX_PAGE))
    names = sorted(encode_name(n) for n in ctx.store.segment_names())
    start = bisect_left(names, prefix)
    if after:
        start = max(start, bisect_right(names, after))
    page: list[bytes] = []
    for raw in names[start:]:
        if not raw.startswith(prefix) or len(page) == count:
            break
        page.append(raw)
    token = page[-1] if len(page) == count else b""
    return TableKeysRead(cmd.request_id, cmd.segment, tuple(TableKey(k, 0) for k in page), token)


LISTING_HANDLERS: HandlerTable = {ReadTableKeys: read_table_keys_or_listing}
