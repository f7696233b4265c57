"""Bugs found by trying the README's examples as a user would, each held by a test that
failed before its fix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


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
