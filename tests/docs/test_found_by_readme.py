"""Bugs found by trying the README's examples as a user would, each held by a test that
failed before its fix."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

from segmentstore.config import ServerConfig


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
