"""The controller with auth on, as Pravega authorizes it: listings filtered per caller,
createStream checked on the scope, and the password file re-read when it changes (users
added, re-passworded and removed by ``segmentstore passwd`` take effect at once)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from segmentstore_client.auth import authorization_header
from segmentstore_client.controller_proto import controller_pb2 as pb
from segmentstore_client.controller_proto import controller_pb2_grpc as pb_grpc

from segmentstore.auth.controller_rules import required, scope_visible
from segmentstore.auth.tokens import Permission

from .test_secure_setup import Secure, _secure_server, passwd

pytestmark = pytest.mark.timeout(120)
R, RU = Permission.READ, Permission.READ_UPDATE
Call = Callable[[str, Any, "tuple[str, str] | str"], Any]


def test_scope_visibility_rule() -> None:
    assert scope_visible({"prn::*": RU}, "any")
    assert scope_visible({"prn::/scope:app": R}, "app")
    assert scope_visible({"prn::/scope:app/*": R}, "app")
    assert scope_visible({"prn::/scope:app/stream:t": R}, "app")
    assert scope_visible({"prn::/scope:ap*": R}, "app")
    assert scope_visible({"prn::/scope:*/stream:t": R}, "app")
    assert not scope_visible({"prn::/scope:app/*": R}, "apple")
    assert not scope_visible({"prn::/scope:apple": R}, "app")
    assert not scope_visible({"prn::/scope:app": Permission.NONE}, "app")
    assert not scope_visible({}, "app")
    config = pb.StreamConfig(streamInfo=pb.StreamInfo(scope="s", stream="t"))
    assert required("createStream", config) == ("prn::/scope:s", RU)  # the scope, as Pravega
    assert required("updateStream", config) == ("prn::/scope:s/stream:t", RU)
    assert required("listScopes", pb.ScopesRequest()) is None  # filtered, not refused
    group = pb.ReaderGroupConfiguration(scope="s", readerGroupName="g")
    assert required("createReaderGroup", group) == ("prn::/scope:s", RU)
    assert required("updateReaderGroup", group) == ("prn::/scope:s/reader-group:g", RU)
    info = pb.ReaderGroupInfo(scope="s", readerGroup="g")
    assert required("getReaderGroupConfig", info) == ("prn::/scope:s/reader-group:g", R)
    table = pb.KeyValueTableInfo(scope="s", kvtName="t")
    assert required("deleteKeyValueTable", table) == ("prn::/scope:s/key-value-table:t", RU)
    assert required("getCurrentSegmentsKeyValueTable", table)[1] == R  # type: ignore[index]


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    s = _secure_server(tmp_path_factory.mktemp("acl"))
    yield s
    s.server.kill()


@pytest.fixture
def call(secure: Secure) -> Iterator[Call]:
    root = Path(secure.pki.ca_pem).read_bytes()
    target = secure.controller.removeprefix("tls://")
    with grpc.secure_channel(target, grpc.ssl_channel_credentials(root)) as channel:
        stub = pb_grpc.ControllerServiceStub(channel)

        def do(method: str, request: Any, creds: tuple[str, str] | str) -> Any:
            md = (("authorization", authorization_header(creds)),)
            return getattr(stub, method)(request, metadata=md, timeout=10)

        yield do


def _config(scope: str, stream: str) -> Any:
    return pb.StreamConfig(
        streamInfo=pb.StreamInfo(scope=scope, stream=stream),
        scalingPolicy=pb.ScalingPolicy(minNumSegments=1),
    )


def _add_user(secure: Secure, name: str, acl: str, password: str) -> None:
    pw = str(Path(secure.pki.ca_pem).parents[1] / "passwd")
    done = passwd(pw, name, "--acl", acl, "--password-stdin", stdin=password + "\n")
    assert done.returncode == 0, done.stderr


def _denied(call: Call, method: str, request: Any, creds: tuple[str, str] | str) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as info:
        call(method, request, creds)
    code: grpc.StatusCode = info.value.code()
    return code


def test_listings_show_what_the_caller_has_grants_on(secure: Secure, call: Call) -> None:
    admin = secure.static_token
    for scope, streams in (("app", ["t", "u"]), ("other", ["x"]), ("shared", ["y", "z"])):
        call("createScope", pb.ScopeInfo(scope=scope), admin)
        for stream in streams:
            call("createStream", _config(scope, stream), admin)
    # Added while the server runs: the password file is re-read on its change.
    _add_user(secure, "carol", "prn::/scope:shared/stream:y,READ", "carol-pw")
    alice, reader, carol = ("alice", "alice-pw"), ("reader", "reader-pw"), ("carol", "carol-pw")

    def scopes(creds: tuple[str, str] | str) -> list[str]:
        return list(call("listScopes", pb.ScopesRequest(), creds).scopes)

    def streams(scope: str, creds: tuple[str, str] | str) -> Any:
        request = pb.StreamsInScopeRequest(scope=pb.ScopeInfo(scope=scope))
        reply = call("listStreamsInScope", request, creds)
        return [s.stream for s in reply.streams] or reply.status

    assert {"app", "other", "shared"} <= set(scopes(admin))  # the admin role sees everything
    assert scopes(alice) == scopes(reader) == ["app"]
    assert scopes(carol) == ["shared"]  # a grant on one stream shows its scope
    assert streams("app", alice) == streams("app", reader) == ["t", "u"]
    assert streams("shared", carol) == ["y"]  # not z
    assert streams("other", alice) == pb.StreamsInScopeResponse.SCOPE_NOT_FOUND  # hidden
    assert streams("shared", admin) == ["y", "z"]


def test_create_stream_needs_read_update_on_the_scope(secure: Secure, call: Call) -> None:
    call("createScope", pb.ScopeInfo(scope="make"), secure.static_token)
    _add_user(secure, "maker", "prn::/scope:make,READ_UPDATE", "maker-pw")
    _add_user(secure, "streamer", "prn::/scope:make/stream:s2,READ_UPDATE", "streamer-pw")
    reply = call("createStream", _config("make", "s1"), ("maker", "maker-pw"))
    assert reply.status == pb.CreateStreamStatus.SUCCESS  # a scope grant creates streams
    code = _denied(call, "createStream", _config("make", "s2"), ("streamer", "streamer-pw"))
    assert code == grpc.StatusCode.PERMISSION_DENIED  # a grant on the stream alone does not
    info = pb.StreamInfo(scope="make", stream="s1")
    # ... but stream-level calls still need the stream: maker has no grant on make/s1.
    code = _denied(call, "sealStream", info, ("maker", "maker-pw"))
    assert code == grpc.StatusCode.PERMISSION_DENIED


def test_password_changes_and_removals_take_effect_without_a_restart(
    secure: Secure, call: Call
) -> None:
    info = pb.ScopeInfo(scope="app")
    call("createScope", info, secure.static_token)  # (or SCOPE_EXISTS: tests share a server)
    _add_user(secure, "dave", "prn::/scope:app,READ", "old-pw")
    assert call("checkScopeExists", info, ("dave", "old-pw")).exists
    _add_user(secure, "dave", "prn::/scope:app,READ", "new-pw")  # a new password
    assert _denied(call, "checkScopeExists", info, ("dave", "old-pw")) == (
        grpc.StatusCode.UNAUTHENTICATED
    )  # the cached success of the old password is gone
    assert call("checkScopeExists", info, ("dave", "new-pw")).exists
    pw = Path(secure.pki.ca_pem).parents[1] / "passwd"
    good = pw.read_text()
    pw.write_text(good + "broken line without fields\n")  # a bad edit: the users stay
    assert call("checkScopeExists", info, ("dave", "new-pw")).exists
    pw.write_text(good)
    assert passwd(str(pw), "dave", "--remove").returncode == 0
    assert _denied(call, "checkScopeExists", info, ("dave", "new-pw")) == (
        grpc.StatusCode.UNAUTHENTICATED
    )
    assert any("password file re-read" in line for line in secure.server.log)
