"""Bugs found by trying the README's examples as a user would, each held by a test that
failed before its fix."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from segmentstore_client.pool import within

from segmentstore.config import ConfigError, ServerConfig, load_config


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
