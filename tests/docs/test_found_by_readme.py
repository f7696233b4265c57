"""Bugs found by trying the README's examples as a user would, each held by a test that
failed before its fix."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import segmentstore_client
from security.certs import make_pki  # tests/security/certs.py
from security.tokens import write_secret  # tests/security/tokens.py
from segmentstore_client import sync
from segmentstore_client.connection import Endpoint
from segmentstore_client.errors import ConnectFailed
from segmentstore_client.pool import within
from segmentstore_client.streams.controller_client import ControllerClient

from segmentstore.config import ConfigError, ServerConfig, load_config
from segmentstore.server.launcher import ServerProcess


def test_passwd_without_terminal_asks_for_password_stdin(tmp_path: Path) -> None:
    """``passwd`` without ``--password-stdin`` and without a terminal used to go through
    getpass: a GetPassWarning on stderr, then the next line of input (in a pasted block,
    the next command) read as the password. Now: one line naming the option, exit 2,
    no file written."""
    users = tmp_path / "users"
    proc = subprocess.run(
        [sys.executable, "-m", "segmentstore", "passwd", str(users), "alice"],
        input="the next pasted line\n",
        capture_output=True,
        text=True,
        timeout=60,
        start_new_session=True,  # no controlling terminal, as in a pipe or a job
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        "segmentstore passwd: no terminal to ask for the password: give it with --password-stdin"
    ]
    assert not users.exists()


def test_passwd_password_stdin_still_works(tmp_path: Path) -> None:
    users = tmp_path / "users"
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "segmentstore", "passwd", str(users), "alice"),
            *("--password-stdin", "--acl", "prn::/scope:app/*,READ"),
        ],
        input="alice-pw\n",
        capture_output=True,
        text=True,
        timeout=60,
        start_new_session=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert users.read_text().startswith("alice:pbkdf2_sha256$")


def test_serve_help_names_every_setting() -> None:
    """The README's Quick start: "`segmentstore serve --help` lists every setting". Of the
    server's settings, 18 (budgets, timeouts, controller tuning) had no flag and were not
    in the help; they are named in its epilog now, with their defaults."""
    proc = subprocess.run(
        [sys.executable, "-m", "segmentstore", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "2000"},  # no wrapping inside a name
    )
    assert proc.returncode == 0, proc.stderr
    missing = [
        f.name
        for f in dataclasses.fields(ServerConfig)
        if "--" + f.name.replace("_", "-") not in proc.stdout
        and f"{f.name}={f.default}" not in proc.stdout
    ]
    assert missing == []


def _without(module: str, argv: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``segmentstore ARGV`` in a process where ``module`` cannot be imported, as after
    ``pip install .`` (the SDK alone, no server extra)."""
    code = (
        f"import sys; sys.modules[{module!r}] = None\n"
        "from segmentstore import cli\n"
        f"sys.exit(cli.main({argv!r}))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        input="pw\n",
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )


def test_client_commands_work_without_the_server_packages(tmp_path: Path) -> None:
    """With ``pip install .`` every ``segmentstore`` command died with a traceback (No
    module named 'jwt'): building the parser imported ``passwd``'s server-side imports.
    Client commands work now; ``passwd`` and ``serve`` say which extra they need."""
    done = _without("jwt", ["completion", "bash"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "complete" in done.stdout
    done = _without("jwt", ["passwd", "users", "alice", "--password-stdin"], tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("segmentstore passwd: needs the server's packages: ")
    assert "segmentstore[server]" in done.stderr and "Traceback" not in done.stderr
    args = ["serve", "--port", "0", "--http-port", "0", "--data-dir", str(tmp_path / "d")]
    done = _without("prometheus_client", args, tmp_path)  # imported as the server starts
    assert done.returncode == 2
    last = done.stderr.splitlines()[-1]  # after the start-up log lines
    assert last.startswith("segmentstore: serve needs the server's packages: "), done.stderr
    assert "Traceback" not in done.stderr


def _serve(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SEGMENTSTORE_")}
    return subprocess.run(
        [sys.executable, "-m", "segmentstore", "serve", *args],
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


def _one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    errors = [ln for ln in done.stderr.splitlines() if " INFO " not in ln]
    assert len(errors) == 1, done.stderr
    return errors[0]


def test_bad_log_level_is_one_line(tmp_path: Path) -> None:
    """``--log-level LOUD`` (or ``SEGMENTSTORE_LOG_LEVEL=x``) ended in logging's
    ValueError traceback; the Server section promises one line naming the setting."""
    data = ["--data-dir", str(tmp_path / "d"), "--port", "0"]
    line = _one_error_line(_serve([*data, "--log-level", "LOUD"]))
    assert line == "segmentstore: log_level must be one of DEBUG, INFO, WARNING, ERROR, not 'LOUD'"
    line = _one_error_line(_serve(data, {"SEGMENTSTORE_LOG_LEVEL": "x"}))
    assert line.startswith("segmentstore: log_level must be one of")
    assert load_config({"log_level": "debug"}, environ={}).log_level == "debug"  # any case


def test_fsync_interval_must_be_positive() -> None:
    """``--fsync interval --fsync-interval-ms 0`` (or -1) was taken: the periodic fsync
    then slept 0 s between fsyncs and the server used a whole core while idle."""
    for bad in (0, -1):
        with pytest.raises(ConfigError, match=f"fsync_interval_ms must be at least 1, not {bad}"):
            load_config({"fsync": "interval", "fsync_interval_ms": bad}, environ={})
    assert load_config({"fsync_interval_ms": 1}, environ={}).fsync_interval_ms == 1


def test_toml_booleans_for_on_off_settings(tmp_path: Path) -> None:
    """A config file saying ``direct_io = false`` (TOML's own boolean) was refused with
    "direct_io must be on or off, not 'False'"; true and false now mean on and off."""
    toml = tmp_path / "ss.toml"
    toml.write_text("direct_io = false\nauth = false\nhttp_auth = false\n")
    config = load_config({}, environ={}, toml_path=toml)
    assert (config.direct_io, config.auth, config.http_auth) == ("off", "off", "off")
    toml.write_text("direct_io = true\n")
    assert load_config({}, environ={}, toml_path=toml).direct_io == "on"
    toml.write_text('direct_io = "maybe"\n')
    with pytest.raises(ConfigError, match="direct_io must be on or off, not 'maybe'"):
        load_config({}, environ={}, toml_path=toml)


def test_busy_port_says_which_flag_moves_it(tmp_path: Path) -> None:
    """A second ``scripts/run`` (defaults) said "cannot listen on 127.0.0.1:12345: error
    while attempting to bind on address ('127.0.0.1', 12345): address already in use": the
    address twice and no way out. Now the errno's words and the flag that picks another
    port; a data dir that is a file says so (mkdir's "file exists" did not)."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        base = ["--data-dir", str(tmp_path / "d"), "--port", "0", "--http-port", "-1"]
        base += ["--controller-port", "-1"]
        for flag in ("--port", "--http-port", "--controller-port"):
            line = _one_error_line(_serve([*base, flag, port]))
            assert f"127.0.0.1:{port}" in line
            assert line.endswith(
                f": address already in use (another server? {flag} picks another port, "
                "0 any free one)"
            ), line
            assert "error while attempting" not in line
    (tmp_path / "file").write_text("not a directory")
    line = _one_error_line(_serve([*base, "--data-dir", str(tmp_path / "file")]))
    assert line.endswith(": it is a file, not a directory"), line


def test_negative_timeout_leaves_no_unawaited_coroutine() -> None:
    """The Client section's per-call ``timeout=``: ``client.ping(timeout=-1)`` raised its
    ValueError, and then Python printed "RuntimeWarning: coroutine 'Client.ping.<locals>.once'
    was never awaited" (the call's coroutine was made before the check and dropped; the
    same for admin calls, ``read_bytes``, ``list_segments`` and ``flush``)."""

    async def call() -> int:
        return 1

    async def main() -> None:
        work = call()
        try:
            with pytest.raises(ValueError, match="timeout must not be negative"):
                await within(-1, work)
            assert work.cr_frame is None  # closed, so nothing warns when it is collected
        finally:
            work.close()
        assert await within(0.5, call()) == 1

    asyncio.run(main())


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEGMENTSTORE_")}
    return subprocess.run(
        [sys.executable, "-m", "segmentstore", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_refused_endpoint_says_so_in_words() -> None:
    """The Command line section's "a refused port": every client command printed
    "could not connect to tcp://127.0.0.1:N: [Errno 111] Connect call failed ('127.0.0.1', N)";
    the controller's refusal was gRPC's "failed to connect to all addresses; last error:
    UNKNOWN: ipv4:...". Both say "connection refused" with a hint now."""
    port = _free_port()
    done = _cli("segment", "info", "x/0", "--endpoint", f"tcp://127.0.0.1:{port}")
    assert done.returncode == 3, done.stderr
    assert done.stderr == (
        f"segmentstore: could not connect to tcp://127.0.0.1:{port}: connection refused "
        "(is a segment store listening there?)\n"
    )
    controller = ControllerClient(f"tcp://127.0.0.1:{port}", timeout=5)

    async def list_scopes() -> None:
        try:
            await controller.call("listScopes", controller.messages().ScopesRequest())
        finally:
            await controller.close()

    with pytest.raises(ConnectFailed) as caught:
        asyncio.run(list_scopes())
    assert str(caught.value) == (
        f"controller tcp://127.0.0.1:{port} unreachable (listScopes): connection refused "
        "(is a controller listening there?)"
    )


def test_ipv6_endpoints() -> None:
    """``--endpoint tcp://[::1]:12345`` was parsed, written back as ``tcp://::1:12345``
    and parsed again: "internal error: ValueError: no host in endpoint" (exit 70). An
    endpoint now keeps the brackets wherever it is written (its URI, the default
    controller and metrics addresses, gRPC targets)."""
    ep = Endpoint.parse("tcp://[::1]:12345")
    assert (ep.host, ep.port, str(ep), ep.netloc) == (
        "::1",
        12345,
        "tcp://[::1]:12345",
        "[::1]:12345",
    )
    assert Endpoint.parse(str(ep)) == ep
    assert str(Endpoint.parse("tls://[fe80::1]")) == "tls://[fe80::1]:12345"
    assert Endpoint.parse("127.0.0.1:1").netloc == "127.0.0.1:1"
    port = str(_free_port())
    done = _cli("segment", "info", "x/0", "--endpoint", f"tcp://[::1]:{port}")
    assert done.returncode == 3, done.stderr  # refused (or no IPv6): unreachable, not a bug
    assert done.stderr.startswith(f"segmentstore: could not connect to tcp://[::1]:{port}: ")
    done = _cli("scope", "list", "--endpoint", f"tcp://[::1]:{port}")  # default controller
    assert done.returncode == 3, done.stderr
    assert "could not connect to tcp://[::1]" in done.stderr, done.stderr
    done = _cli("health", "--endpoint", f"tcp://[::1]:{port}", "--json")
    assert done.returncode == 1, done.stderr
    checks = {c["name"]: c["detail"] for c in json.loads(done.stdout)["checks"]}
    assert checks["metrics"].startswith("http://[::1]:9091/metrics: "), checks


def test_serve_on_ipv6_with_its_controller(tmp_path: Path) -> None:
    """``segmentstore serve --host ::1`` failed to start: the controller bound gRPC to
    "::1:0" ("Failed to bind to address ::1:0"), and the ready line read "listening on
    ::1:35089". Now the server starts, its ready line brackets the addresses, and the
    SDK creates a scope and a stream through that controller and writes and reads."""
    with socket.socket(socket.AF_INET6) as probe:
        try:
            probe.bind(("::1", 0))
        except OSError:  # CI's machine has it: there the test must not go quiet
            if os.environ.get("CI") == "true":
                pytest.fail("no IPv6 loopback on this machine, under CI=true")
            pytest.skip("no IPv6 loopback on this machine")
    base = {k: v for k, v in os.environ.items() if not k.startswith("SEGMENTSTORE_")}
    args = ["--host", "::1", "--http-host", "::1", "--port", "0", "--http-port", "0"]
    args += ["--controller-port", "0", "--log-file-mb", "4", "--data-dir", str(tmp_path / "d")]
    proc = subprocess.Popen(
        [sys.executable, "-m", "segmentstore", "serve", *args],
        env=base,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        ready = ""
        for _ in range(100):  # bounded: the start-up log is a few lines
            line = proc.stderr.readline()
            if not line or "segmentstore ready" in line:
                ready = line
                break
        m = re.search(
            r"listening on (\[::1\]:\d+), metrics on http://\[::1\]:\d+/metrics, "
            r"controller on (tcp://\[::1\]:\d+),",
            ready,
        )
        assert m, ready
        with sync.connect(f"tcp://{m.group(1)}", controller=m.group(2), connect_timeout=10) as c:
            c.create_scope("v6", exist_ok=True)
            c.create_stream("v6/s", 2, exist_ok=True)
            with c.stream_writer("v6/s", writer_id="w") as w:
                w.write(b"over IPv6", routing_key="k")
            info = c.stream_info("v6/s")
            assert sum(s.events for s in info.segments.values()) == 1
    finally:
        proc.terminate()
        proc.wait(30)


def test_top_level_help_names_user_and_token_plainly() -> None:
    """``segmentstore --help`` showed ``--user TOP_USER`` and ``--token TOP_TOKEN``: the
    top-level copies' internal names, where every subcommand shows USER and TOKEN."""
    done = _cli("--help")
    assert done.returncode == 0, done.stderr
    assert "TOP_" not in done.stdout
    assert "--user USER" in done.stdout and "--token TOKEN" in done.stdout


@dataclasses.dataclass
class _Secure:
    server: ServerProcess
    ca: str
    controller: str

    def args(self, *, scheme: str = "tls") -> list[str]:
        ep = f"{scheme}://localhost:{self.server.port}"
        return ["--endpoint", ep, "--controller", self.controller, "--tls-ca-file", self.ca]


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A store as `scripts/run` starts it (no TLS, no auth), with its controller."""
    server = ServerProcess(
        tmp_path_factory.mktemp("readme-plain") / "data", ["--controller-port", "0"]
    )
    server.start()
    try:
        yield server
    finally:
        server.kill()


def _controller_of(server: ServerProcess) -> str:
    m = re.search(r"controller on (tcp://127\.0\.0\.1:\d+)", "".join(server.log))
    assert m, server.log[-5:]
    return m.group(1)


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Secure]:
    """The Security section's set-up: TLS, auth, users made by ``passwd``; the HTTP port
    asks for credentials too (``--http-auth on``)."""
    tmp = tmp_path_factory.mktemp("readme-secure")
    pki = make_pki(tmp / "pki")
    write_secret(tmp / "secret")
    users = str(tmp / "users")
    for user, role in (
        ("alice", ["--acl", "prn::/scope:app,READ_UPDATE;prn::/scope:app/*,READ_UPDATE"]),
        ("admin", ["--admin"]),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "segmentstore", "passwd", users, user, *role, "--password-stdin"],
            input=f"{user}-pw\n", capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    server = ServerProcess(
        tmp / "data",
        [
            "--tls-cert-file", pki.server_pem, "--tls-key-file", pki.server_key,
            "--auth", "on", "--auth-token-secret-file", str(tmp / "secret"),
            "--auth-password-file", users, "--http-auth", "on", "--controller-port", "0",
            "--advertised-host", "localhost",
        ],
    )  # fmt: skip
    server.start()
    try:
        m = re.search(r"controller on tls://127\.0\.0\.1:(\d+)", "".join(server.log))
        assert m, server.log[-5:]
        yield _Secure(server, pki.ca_pem, f"tls://localhost:{m.group(1)}")
    finally:
        server.kill()


def _cli_as(user: str | None, password: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEGMENTSTORE_")}
    env["SEGMENTSTORE_PASSWORD"] = password
    who = ["--user", user] if user else []
    return subprocess.run(
        [sys.executable, "-m", "segmentstore", *args, *who],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_wrong_password_and_no_credentials_say_which(secure: _Secure) -> None:
    """Security, "wrong password": the controller answered "authentication required" to
    a wrong password as to none at all, and a command without credentials got "delegation
    token refused: no delegation token" with no word on how to give them."""
    done = _cli_as("alice", "wrong", "scope", "list", *secure.args())
    assert done.returncode == 15, done.stderr
    assert done.stderr.endswith("wrong user name, password or token\n"), done.stderr
    done = _cli_as(None, "", "segment", "info", "app/x/0", *secure.args())
    assert done.returncode == 15, done.stderr
    assert done.stderr.endswith(
        " (authenticate with --user and $SEGMENTSTORE_PASSWORD, or --token)\n"
    ), done.stderr
    done = _cli_as("alice", "alice-pw", "segment", "create", "app/x/0", *secure.args())
    assert done.returncode == 0, done.stderr


def test_health_of_a_secure_store(secure: _Secure) -> None:
    """``segmentstore health`` against the Security set-up: its metrics check fetched the
    HTTPS port with the system's trust store (CERTIFICATE_VERIFY_FAILED with the README's
    self-signed certificate) and no credentials (401 with --http-auth on), and its default
    URL said http:// for a tls:// endpoint. It uses --tls-ca-file, --user and --token now."""
    url = f"https://localhost:{secure.server.http_port}/metrics"
    done = _cli_as("admin", "admin-pw", "health", "--json", "--metrics-url", url, *secure.args())
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["metrics"]["ok"], checks["metrics"]
    assert done.returncode == 0, done.stdout
    done = _cli_as("admin", "wrong", "health", "--json", "--metrics-url", url, *secure.args())
    assert done.returncode == 1
    done = _cli_as("admin", "admin-pw", "health", "--json", *secure.args())
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["metrics"]["detail"].startswith("https://localhost:9091/metrics"), checks


def test_endpoint_at_a_wrong_port_or_scheme(secure: _Secure, plain: ServerProcess) -> None:
    """An endpoint given the wrong port or scheme, as a Pravega user who knows 9090 as
    "the" address would: tcp:// to a TLS store said "closed the connection during Hello:
    tcp://... closed the connection", tls:// to a plain one "could not connect to tls://...:"
    and nothing after it, the metrics or controller port "sent an invalid frame: unknown
    wire command type 1213486160". Each names the likely cause now."""
    # A plain close during Hello may be a full server (max_connections), so it is retried
    # for the connect timeout: 2 s here.
    done = _cli_as(None, "", "segment", "info", "a/0", "--timeout", "2", *secure.args(scheme="tcp"))
    assert done.returncode == 3
    assert done.stderr == (
        f"segmentstore: tcp://localhost:{secure.server.port} closed the connection during "
        "Hello (a server with TLS on takes tls://)\n"
    )
    port = plain.port
    done = _cli("segment", "info", "a/0", "--timeout", "2", "--endpoint", f"tls://127.0.0.1:{port}")
    assert done.returncode == 3
    assert done.stderr == (
        f"segmentstore: could not connect to tls://127.0.0.1:{port}: the TLS handshake "
        "failed (connection reset); a server without TLS takes tcp://\n"
    )
    where = "not Pravega's wire protocol: the segment store's wire port is another (default 12345)"
    started = time.monotonic()  # another protocol is not a blip: no retries
    done = _cli("segment", "info", "a/0", "--endpoint", f"tcp://127.0.0.1:{plain.http_port}")
    assert done.returncode == 3 and time.monotonic() - started < 8
    assert done.stderr.endswith(f"answered in HTTP (the metrics port?), {where}\n")
    started = time.monotonic()
    controller = _controller_of(plain).removeprefix("tcp://")
    done = _cli("segment", "info", "a/0", "--endpoint", f"tcp://{controller}")
    assert done.returncode == 3 and time.monotonic() - started < 8
    assert done.stderr.endswith(f"answered in HTTP/2 (the controller's port?), {where}\n")


def test_stream_list_without_a_scope_lists_every_scope(plain: ServerProcess) -> None:
    """``segmentstore stream list`` (as ``kafka-topics --list``) was a usage error: "the
    following arguments are required: scope". Without one it lists every scope's streams."""
    with sync.connect(plain.endpoint, controller=_controller_of(plain)) as c:
        for scope in ("first", "second"):
            c.create_scope(scope, exist_ok=True)
            c.create_stream(f"{scope}/s", 1, exist_ok=True)
    args = ["--endpoint", plain.endpoint, "--controller", _controller_of(plain)]
    done = _cli("stream", "list", *args)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["first/s", "second/s"]
    done = _cli("stream", "list", "second", *args)
    assert done.stdout.splitlines() == ["second/s"]


def test_misspelt_toml_key_gets_a_suggestion(tmp_path: Path) -> None:
    """A config file with ``fsnyc = "never"`` stopped the server with "unknown setting
    'fsnyc'" and left the user to find the right name among 50; now it names it."""
    toml = tmp_path / "ss.toml"
    toml.write_text('fsnyc = "never"\n')
    with pytest.raises(ConfigError, match=r"unknown setting 'fsnyc' \(did you mean 'fsync'\?\)$"):
        load_config({}, environ={}, toml_path=toml)
    toml.write_text("zzz = 1\n")
    with pytest.raises(ConfigError, match=r"unknown setting 'zzz'$"):
        load_config({}, environ={}, toml_path=toml)


def test_reader_group_start_must_be_head_tail_or_cuts(plain: ServerProcess) -> None:
    """The Client section's ``reader_group(name, streams, "head")``: any other string
    (``"earliest"``, as a Kafka user writes it, or ``"Head"``) was taken as the tail, so
    the group silently skipped every event already in the stream. Now a ValueError."""
    with sync.connect(plain.endpoint, controller=_controller_of(plain)) as c:
        c.create_scope("rg", exist_ok=True)
        c.create_stream("rg/s", 1, exist_ok=True)
        with c.stream_writer("rg/s", writer_id="w") as w:
            w.write(b"already there")
        for bad in ("earliest", "Head"):
            with pytest.raises(
                ValueError, match=f"start must be 'head', 'tail' or stream cuts, not '{bad}'"
            ):
                c.reader_group(f"rg/g-{bad.lower()}", ["rg/s"], bad)  # type: ignore[arg-type]
        group = c.reader_group("rg/g", ["rg/s"], "head")
        with pytest.raises(ValueError, match="not 'latest'"):
            group.reset("latest")  # type: ignore[arg-type]
        reader = group.reader("r")
        assert [e.data for e in reader.events(idle_timeout=1)] == [b"already there"]
        reader.close()
        group.delete()


def test_health_metrics_refused_says_what_to_do(plain: ServerProcess) -> None:
    """``segmentstore health`` against a store whose metrics are not on port 9091 (or are
    off) failed with "http://127.0.0.1:9091/metrics: [Errno 111] Connection refused"."""
    url = f"http://127.0.0.1:{_free_port()}/metrics"
    done = _cli("health", "--json", "--endpoint", plain.endpoint, "--metrics-url", url)
    assert done.returncode == 1, done.stderr
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["hello"]["ok"] and checks["round trip"]["ok"], checks
    assert checks["metrics"]["detail"] == (
        f"{url}: connection refused (metrics on another --http-port? --metrics-url names it, "
        "--no-metrics skips this check)"
    )


def test_user_without_controller_uses_the_default_controller(secure: _Secure) -> None:
    """``--user alice`` without ``--controller`` (whose help says it defaults to the
    endpoint's host, port 9090) was "internal error: ValueError: refresh_token needs
    credentials= and controller=" (exit 70): the SDK fetched tokens only from a controller
    named outright, and its stream default said tcp:// for a tls:// store."""
    done = _cli_as(
        "alice", "alice-pw", "segment", "info", "app/x/0", "--tls-ca-file", secure.ca,
        "--endpoint", f"tls://localhost:{secure.server.port}", "--timeout", "1",
    )  # fmt: skip
    assert done.returncode == 3, done.stderr  # the README's set-up has it on 9090; here not
    assert done.stderr.startswith("segmentstore: cannot get a token from tls://localhost:9090: ")
    client = segmentstore_client.connect("tls://h:1", credentials=("a", "b"))
    assert client.options.controller == client.controller_uri == "tls://h:9090"
    options = segmentstore_client.ConnectionOptions(controller="tcp://c:5")
    assert segmentstore_client.connect("tcp://h:1", options=options).controller_uri == "tcp://c:5"


def test_empty_host_or_data_dir_is_refused() -> None:
    """``SEGMENTSTORE_HOST=`` (an empty variable, as a compose file passing an unset one
    makes it) was taken as host "", which listens on every interface instead of the
    default 127.0.0.1; an empty data dir was ".". Both are one clear line now."""
    for name in ("HOST", "HTTP_HOST"):
        with pytest.raises(
            ConfigError, match=r"is empty \(0\.0\.0\.0 listens on every interface\)"
        ):
            load_config({}, environ={f"SEGMENTSTORE_{name}": ""})
    with pytest.raises(
        ConfigError, match="SEGMENTSTORE_DATA_DIR: data_dir = '' is not a valid Path"
    ):
        load_config({}, environ={"SEGMENTSTORE_DATA_DIR": ""})
    assert load_config({}, environ={"SEGMENTSTORE_HOST": "0.0.0.0"}).host == "0.0.0.0"
