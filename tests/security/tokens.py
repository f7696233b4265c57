"""Token helpers of the security tests: a secret file, and each kind of bad token."""

from __future__ import annotations

import base64
import json
import secrets
import time
from pathlib import Path

from segmentstore.auth.tokens import Permission, TokenSigner

RU, R = Permission.READ_UPDATE, Permission.READ


def write_secret(path: Path) -> bytes:
    secret = secrets.token_hex(32).encode()
    path.write_bytes(secret + b"\n")
    return secret


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def alg_none(claims: dict[str, object]) -> str:
    header = _b64(json.dumps({"alg": "none", "typ": "JWT"}).encode())
    return f"{header}.{_b64(json.dumps(claims).encode())}."


def bad_tokens(secret: bytes, scope: str, writing: bool) -> dict[str, str]:
    """Every bad token kind of issue 20, for a request on ``scope``."""
    good = TokenSigner(secret)
    now = time.time()
    mine = {f"prn::/scope:{scope}/*": RU, f"prn::/scope:{scope}": RU}
    tokens = {
        "empty": "",
        "garbage": "not.a.token",
        "wrong key": TokenSigner(secrets.token_bytes(64)).issue("eve", mine, 600, now),
        "expired": good.issue("alice", mine, 60, now - 3600),
        "another scope": good.issue("alice", {"prn::/scope:other/*": RU}, 600, now),
        "alg none": alg_none(
            {"sub": "eve", "aud": "segmentstore", "exp": int(now) + 600, "prn::*": "READ_UPDATE"}
        ),
    }
    if writing:
        read_only = {f"prn::/scope:{scope}/*": R, f"prn::/scope:{scope}": R}
        tokens["read-only on a write"] = good.issue("alice", read_only, 600, now)
    return tokens
