"""Delegation tokens on the segment store, row by row of the command -> permission table.

A real server runs with ``--auth on``; every request class that carries a token is sent
with each bad token kind (empty, garbage, wrong key, expired, another scope, read-only on a
write, ``alg: none``) and must get ``AuthTokenCheckFailed`` with the reference's code
(1 TOKEN_EXPIRED for the expired one, 0 TOKEN_CHECK_FAILED otherwise); the same request
with a good token gets past the check (whatever the handler then answers). The check's
per-connection cache is tested in process with an injected clock.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from segmentstore_client import protocol as p
from segmentstore_client.protocol import AuthTokenCheckFailed, Command, TableEntry, TableKey
from server.wire import WireClient, next_id

from segmentstore.auth import TOKEN_CHECK_FAILED, TOKEN_EXPIRED, Authorizer
from segmentstore.auth.resources import REQUIRED, segment_resource, touched_segments
from segmentstore.auth.tokens import TokenInvalid, TokenSigner, pattern_matches
from segmentstore.server.launcher import ServerProcess
from segmentstore.server.listing import LISTING_HANDLERS
from segmentstore.server.segment_handlers import SEGMENT_HANDLERS
from segmentstore.server.table_handlers import TABLE_HANDLERS

from .tokens import RU, R, bad_tokens, write_secret

SEG = "app/s/0.#epoch.0"
TABLE = "app/_tables/kv/0"
U = uuid.UUID(int=7)

# One row per request class: how to build it with a token, and the permission it needs.
ROWS: dict[type[Command], Callable[[str], Command]] = {
    p.SetupAppend: lambda t: p.SetupAppend(next_id(), uuid.uuid4(), SEG, t),
    p.ReadSegment: lambda t: p.ReadSegment(SEG, 0, 100, t, next_id()),
    p.GetStreamSegmentInfo: lambda t: p.GetStreamSegmentInfo(next_id(), SEG, t),
    p.CreateSegment: lambda t: p.CreateSegment(next_id(), "app/s/9", 0, 0, t),
    p.CreateTransientSegment: lambda t: p.CreateTransientSegment(next_id(), U, SEG, t),
    p.SealSegment: lambda t: p.SealSegment(next_id(), "app/s/gone", t),
    p.TruncateSegment: lambda t: p.TruncateSegment(next_id(), "app/s/gone", 0, t),
    p.DeleteSegment: lambda t: p.DeleteSegment(next_id(), "app/s/gone", t),
    p.UpdateSegmentPolicy: lambda t: p.UpdateSegmentPolicy(next_id(), "app/s/gone", 0, 0, t),
    p.MergeSegments: lambda t: p.MergeSegments(next_id(), "app/s/gone", "app/s/gone2", t),
    p.MergeSegmentsBatch: lambda t: p.MergeSegmentsBatch(next_id(), "app/s/gone", ("app/s/x",), t),
    p.LocateOffset: lambda t: p.LocateOffset(next_id(), SEG, 0, t),
    p.GetSegmentAttribute: lambda t: p.GetSegmentAttribute(next_id(), SEG, U, t),
    p.UpdateSegmentAttribute: lambda t: p.UpdateSegmentAttribute(next_id(), SEG, U, 1, -1, t),
    p.GetTableSegmentInfo: lambda t: p.GetTableSegmentInfo(next_id(), TABLE, t),
    p.CreateTableSegment: lambda t: p.CreateTableSegment(next_id(), TABLE, t),
    p.DeleteTableSegment: lambda t: p.DeleteTableSegment(next_id(), "app/_tables/x/0", False, t),
    p.UpdateTableEntries: lambda t: p.UpdateTableEntries(
        next_id(), TABLE, t, (TableEntry(b"k", b"v"),)
    ),
    p.RemoveTableKeys: lambda t: p.RemoveTableKeys(next_id(), TABLE, t, (TableKey(b"x"),)),
    p.ReadTable: lambda t: p.ReadTable(next_id(), TABLE, t, (TableKey(b"k"),)),
    p.ReadTableKeys: lambda t: p.ReadTableKeys(next_id(), TABLE, t, 10),
    p.ReadTableEntries: lambda t: p.ReadTableEntries(next_id(), TABLE, t, 10),
    p.ReadTableEntriesDelta: lambda t: p.ReadTableEntriesDelta(next_id(), TABLE, t, 0, 10),
    p.FlushToStorage: lambda t: p.FlushToStorage(0, t, next_id()),
    p.ListStorageChunks: lambda t: p.ListStorageChunks(SEG, t, next_id()),
}


def test_every_request_with_a_token_field_has_a_row() -> None:
    served = {*SEGMENT_HANDLERS, *TABLE_HANDLERS, *LISTING_HANDLERS}
    served |= {p.SetupAppend, p.ReadSegment, p.CreateTransientSegment}
    with_token = {k for k in served if "delegation_token" in k.__dataclass_fields__}
    assert with_token == set(REQUIRED) == set(ROWS)


def test_resource_names() -> None:
    assert segment_resource(SEG) == "prn::/scope:app/stream:s"
    assert segment_resource(TABLE) == "prn::/scope:app/key-value-table:kv"
    assert segment_resource("app/_RGg/0") == "prn::/scope:app/reader-group:g"
    assert segment_resource("app/g_kvtable/0.#epoch.0") == "prn::/scope:app/reader-group:g"
    assert segment_resource("solo") == "prn::/scope:solo"
    assert pattern_matches("prn::/scope:app/*", "prn::/scope:app/stream:s")
    assert not pattern_matches("prn::/scope:app/*", "prn::/scope:apple/stream:s")
    assert not pattern_matches("prn::/scope:app", "prn::/scope:app/stream:s")
    assert pattern_matches("prn::*", "prn::")
    merge = p.MergeSegments(1, "app/a/0", "other/b/0", "")
    assert touched_segments(merge) == ("app/a/0", "other/b/0")


@pytest.fixture(scope="module")
def secret(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    path = tmp_path_factory.mktemp("secret") / "secret"
    return path, write_secret(path)


@pytest.fixture(scope="module")
def auth_server(
    secret: tuple[Path, bytes], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    s = ServerProcess(
        tmp_path_factory.mktemp("auth"),
        ["--auth", "on", "--auth-token-secret-file", str(secret[0])],
    )
    s.start()
    yield s
    s.kill()


@pytest.mark.parametrize("kind", list(ROWS), ids=lambda k: k.__name__)
async def test_row(
    kind: type[Command], auth_server: ServerProcess, secret: tuple[Path, bytes]
) -> None:
    build = ROWS[kind]
    writing = REQUIRED[kind] == RU
    signer = TokenSigner(secret[1])
    admin = kind in (p.FlushToStorage, p.ListStorageChunks)
    grant = {"prn::*": RU} if admin else {"prn::/scope:app/*": RU}
    good = signer.issue("alice", grant, 600, time.time())
    async with await WireClient.connect("127.0.0.1", auth_server.port) as c:
        for name, token in bad_tokens(secret[1], "app", writing).items():
            cmd = build(token)
            reply = await c.request(cmd)
            assert isinstance(reply, AuthTokenCheckFailed), (name, reply)
            code = TOKEN_EXPIRED if name == "expired" else TOKEN_CHECK_FAILED
            assert reply.error_code == code, (name, reply)
            assert reply.request_id == cmd.request_id  # type: ignore[attr-defined]
        reply = await c.request(build(good))
        assert not isinstance(reply, AuthTokenCheckFailed), reply
        if not writing:  # READ is enough for a read
            read_only = signer.issue("bob", {"prn::/scope:app/*": R}, 600, time.time())
            reply = await c.request(build(read_only))
            assert not isinstance(reply, AuthTokenCheckFailed), reply


async def test_append_session_works_with_a_good_token(
    auth_server: ServerProcess, secret: tuple[Path, bytes]
) -> None:
    token = TokenSigner(secret[1]).issue("w", {"prn::/scope:app/*": RU}, 600, time.time())
    async with await WireClient.connect("127.0.0.1", auth_server.port) as c:
        created = await c.request(p.CreateSegment(next_id(), "app/w/0", 0, 0, token))
        assert isinstance(created, p.SegmentCreated), created
        writer = uuid.uuid4()
        setup = await c.request(p.SetupAppend(next_id(), writer, "app/w/0", token))
        assert isinstance(setup, p.AppendSetup), setup
        event = p.frame_event(b"hello")
        c.send(p.AppendBlockEnd(writer, len(event), event, 1, 1, next_id()))
        await c.wait_acked(writer, 1)


class _Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_checks_are_cached_per_connection_and_resource_but_expire() -> None:
    signer = TokenSigner(b"k" * 64)
    clock = _Clock()
    auth = Authorizer(signer, clock)
    check = auth.session()
    token = signer.issue("a", {"prn::/scope:app/*": RU}, 60, clock.now)
    for _ in range(1000):
        assert check(p.ReadSegment(SEG, 0, 10, token, 1)) is None
    assert auth.verified == 1  # one signature check for 1000 requests
    clock.now += 61  # the cached grant must not outlive the token
    refused = check(p.ReadSegment(SEG, 0, 10, token, 2))
    assert refused is not None and refused.error_code == TOKEN_EXPIRED
    other = auth.session()  # another connection verifies for itself
    assert other(p.ReadSegment(SEG, 0, 10, token, 3)) is not None
    assert auth.verified == 2


def test_signer_refuses_short_secrets_and_foreign_algorithms() -> None:
    with pytest.raises(ValueError):
        TokenSigner(b"short")
    signer = TokenSigner(b"k" * 64)
    with pytest.raises(TokenInvalid):
        signer.verify("", 0)
    import jwt

    hs256 = jwt.encode({"sub": "a", "aud": "segmentstore", "exp": 10**10}, b"k" * 64, "HS256")
    with pytest.raises(TokenInvalid, match="alg value is not allowed"):
        signer.verify(hs256, time.time())
