"""The password file: users with hashed passwords, static service tokens, and their ACLs.

Contract: one entry a line, ``name:hash:acl`` as Pravega's ``PasswordAuthHandler`` file,
``#`` comments and blank lines ignored. ``hash`` is ``pbkdf2_sha256$<iterations>$<salt>$
<digest>`` (base64) for a password, or ``token_sha256$<digest>`` for a static token (a
random 32-byte secret: one SHA-256 suffices, a slow hash buys nothing). ``acl`` is
``resource,PERMISSION`` pairs separated by ``;`` (``prn::*,READ_UPDATE`` is the admin
role). ``authenticate`` compares in constant time and returns the entry or None. Writes
go to a temporary file renamed over the old one (mode 0600), so a crash leaves either
file whole.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from .tokens import Permission

__all__ = [
    "ADMIN_ACL",
    "PasswordFile",
    "User",
    "format_acl",
    "hash_password",
    "new_static_token",
    "parse_acl",
]

ITERATIONS: Final = 100_000
ADMIN_ACL: Final = {"prn::*": Permission.READ_UPDATE}


@dataclass(frozen=True, slots=True)
class User:
    name: str
    hash: str
    acl: Mapping[str, Permission]

    @property
    def is_token(self) -> bool:
        return self.hash.startswith("token_sha256$")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def hash_password(password: str, iterations: int = ITERATIONS) -> str:
    salt = os.urandom(16)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    return f"pbkdf2_sha256${iterations}${_b64(salt)}${_b64(digest)}"


def new_static_token() -> tuple[str, str]:
    """A fresh static token and the hash to store for it."""
    token = "sst_" + secrets.token_urlsafe(32)
    return token, "token_sha256$" + _b64(hashlib.sha256(token.encode()).digest())


def _matches(stored: str, secret: str) -> bool:
    kind, _, rest = stored.partition("$")
    try:
        if kind == "pbkdf2_sha256":
            n, salt, digest = rest.split("$")
            got = hashlib.pbkdf2_hmac("sha256", secret.encode(), base64.b64decode(salt), int(n))
            return hmac.compare_digest(got, base64.b64decode(digest))
        if kind == "token_sha256":
            got = hashlib.sha256(secret.encode()).digest()
            return hmac.compare_digest(got, base64.b64decode(rest))
    except (ValueError, TypeError):
        return False
    return False


def parse_acl(text: str) -> dict[str, Permission]:
    """``prn::/scope:a/*,READ;prn::/scope:b,READ_UPDATE`` -> {resource: permission}."""
    acl: dict[str, Permission] = {}
    for item in filter(None, (i.strip() for i in text.split(";"))):
        resource, _, level = item.rpartition(",")
        if not resource.startswith("prn::") or level.strip().upper() not in Permission.__members__:
            raise ValueError(f"bad ACL entry {item!r}: want prn::<resource>,READ|READ_UPDATE")
        acl[resource.strip()] = Permission[level.strip().upper()]
    return acl


def format_acl(acl: Mapping[str, Permission]) -> str:
    return ";".join(f"{r},{p.name}" for r, p in acl.items())


class PasswordFile:
    """The users of one password file, read once (``load``) and written whole (``save``)."""

    def __init__(self, path: Path, users: dict[str, User] | None = None) -> None:
        self.path = path
        self.users: dict[str, User] = users or {}

    @classmethod
    def load(cls, path: Path, missing_ok: bool = False) -> PasswordFile:
        try:
            text = path.read_text()
        except FileNotFoundError:
            if missing_ok:
                return cls(path)
            raise ValueError(f"password file {path} does not exist") from None
        except OSError as e:
            raise ValueError(f"cannot read the password file {path}: {e.strerror}") from e
        users: dict[str, User] = {}
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            name, sep, rest = line.partition(":")
            stored, sep2, acl = rest.partition(":")
            if not sep or not sep2 or not name or not stored:
                raise ValueError(f"{path}:{number}: want name:hash:acl")
            try:
                users[name] = User(name, stored, parse_acl(acl))
            except ValueError as e:
                raise ValueError(f"{path}:{number}: {e}") from None
        return cls(path, users)

    def save(self) -> None:
        lines = [f"{u.name}:{u.hash}:{format_acl(u.acl)}\n" for u in self.users.values()]
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.writelines(lines)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def authenticate(self, name: str, secret: str) -> User | None:
        user = self.users.get(name)
        if user is None or not _matches(user.hash, secret):
            return None
        return user

    def by_token(self, token: str) -> User | None:
        """The static-token entry whose token is ``token``."""
        for user in self.users.values():
            if user.is_token and _matches(user.hash, token):
                return user
        return None
