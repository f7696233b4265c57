"""``segmentstore passwd FILE USER``: add or replace a user (or a static token) in a
password file, with its ACL (README "Security").

The password comes from ``--password-stdin`` (first line of stdin) or a prompt on a
terminal (no terminal and no ``--password-stdin``: exit 2, one line); with
``--static-token`` a random token is generated, stored hashed and printed once.
``--remove`` deletes the user. Exit codes: 0 done, 2 bad input or unusable file.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path

from ._cli import examples

EXIT_BAD = 2


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "passwd",
        help="add a user or static token to a password file",
        description="Add or replace USER in the password file FILE (created if missing). "
        "It works on the file; a running server reads the file again when it changes.",
        epilog=examples(
            "segmentstore passwd users alice --acl 'prn::/scope:app,READ_UPDATE;"
            "prn::/scope:app/*,READ_UPDATE'",
            "segmentstore passwd users admin --admin --password-stdin < admin.pw",
            "segmentstore passwd users etl --acl 'prn::/scope:app/*,READ' --static-token",
            "segmentstore passwd users alice --remove",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("file", type=Path, help="the password file (--auth-password-file)")
    p.add_argument("user", help="user name (no ':')")
    p.add_argument(
        "--acl",
        default="",
        help="grants: 'prn::/scope:S/*,READ_UPDATE;prn::/scope:T,READ' (default: none)",
    )
    p.add_argument("--admin", action="store_true", help="grant prn::*,READ_UPDATE (everything)")
    p.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    p.add_argument(
        "--static-token", action="store_true", help="generate a static token instead (printed)"
    )
    p.add_argument("--remove", action="store_true", help="remove the user")
    p.set_defaults(func=handler)


def _fail(message: str) -> int:
    print(f"segmentstore passwd: {message}", file=sys.stderr)
    return EXIT_BAD


def handler(args: argparse.Namespace) -> int:
    # Imported here: segmentstore.auth needs the server's packages (PyJWT), and the other
    # commands must work with the SDK and the `cli` extra alone.
    try:
        from ..auth.passwords import (
            ADMIN_ACL,
            PasswordFile,
            User,
            hash_password,
            new_static_token,
            parse_acl,
        )
    except ImportError as e:
        return _fail(f"needs the server's packages: pip install 'segmentstore[server]' ({e})")
    name: str = args.user
    if not name or ":" in name or "\n" in name:
        return _fail(f"bad user name {name!r} (non-empty, no ':')")
    try:
        pf = PasswordFile.load(args.file, missing_ok=True)
        acl = dict(ADMIN_ACL) if args.admin else parse_acl(args.acl)
    except ValueError as e:
        return _fail(str(e))
    if args.remove:
        if pf.users.pop(name, None) is None:
            return _fail(f"no user {name!r} in {args.file}")
        token = None
    elif args.static_token:
        token, stored = new_static_token()
        pf.users[name] = User(name, stored, acl)
    else:
        token = None
        if args.password_stdin:
            password = sys.stdin.readline().rstrip("\n")
        elif not sys.stdin.isatty():  # getpass would warn and read the next line of input
            return _fail("no terminal to ask for the password: give it with --password-stdin")
        else:
            try:
                password = getpass.getpass(f"password for {name}: ")
            except (EOFError, KeyboardInterrupt):
                return _fail("no password given")
        if not password:
            return _fail("empty password")
        pf.users[name] = User(name, hash_password(password), acl)
    try:
        pf.save()
    except OSError as e:
        return _fail(f"cannot write {args.file}: {e.strerror or e}")
    if token is not None:
        print(token)
    return 0
