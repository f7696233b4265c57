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
