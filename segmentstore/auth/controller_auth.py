"""Authentication on the controller's gRPC port, and the tokens it hands out.

Contract: with auth on, every RPC must carry ``authorization`` metadata: ``Basic
base64(user:password)`` checked against the password file (PBKDF2, run off the event loop)
or ``Bearer <static token>`` for a service. Anything else is answered UNAUTHENTICATED
by ``AuthInterceptor`` before the servicer sees it; an authenticated call then needs the
permission ``controller_rules.required`` names (PERMISSION_DENIED otherwise), and runs
with ``caller_visibility()`` telling the listings what the caller may see (None while auth
is off). Successful checks are cached by a digest of the header (bounded), so a client
pays the slow hash once. The password file is re-read when it changes (its inode, size or
mtime, looked at on every authentication, a stat call), so ``segmentstore passwd`` takes
effect without a restart; the cache is emptied then. A changed file that does not parse
is logged and the users read before stay in force.
``ControllerAuth.delegation_token(header, scope, stream, access)`` checks the user may do
``access`` on the stream (or scope) and signs a token carrying the user's ACL (the
password file's, overridden per resource by the ACL table, ``acls.py``), valid for
``ttl_s`` (PERMISSION_DENIED otherwise: ``PermissionDenied``).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextvars
import hashlib
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

import grpc

from .acls import AclTable
from .controller_rules import FILTERED, UNCHECKED, Visibility, required
from .passwords import PasswordFile, User
from .tokens import Permission, TokenSigner, grants_for

__all__ = ["AuthInterceptor", "ControllerAuth", "PermissionDenied", "caller_visibility"]

log = logging.getLogger("segmentstore.auth")
_VISIBILITY: contextvars.ContextVar[Visibility | None] = contextvars.ContextVar(
    "controller_caller_visibility", default=None
)


def caller_visibility() -> Visibility | None:
    """What the current RPC's caller may see in listings; None while auth is off."""
    return _VISIBILITY.get()


CACHE_ENTRIES: Final = 1024
# StreamInfo.AccessOperation (Pravega): READ = 3, WRITE = 4, READ_WRITE = 5; others read.
_ACCESS: Final = {4: Permission.READ_UPDATE, 5: Permission.READ_UPDATE}


class PermissionDenied(Exception):
    """The user is known but may not do what it asked."""


class ControllerAuth:
    def __init__(self, passwords: PasswordFile, signer: TokenSigner | None, ttl_s: float) -> None:
        self.passwords = passwords
        self.signer = signer
        self.ttl_s = ttl_s
        self._known: dict[bytes, User] = {}
        self._stamp = self._file_stamp()
        self.acls: AclTable | None = None  # run-time grants (acls.py), set by the server

    def _file_stamp(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.passwords.path)
        except OSError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def _reload_if_changed(self) -> None:
        stamp = self._file_stamp()
        if stamp == self._stamp or stamp is None:
            return  # unchanged, or gone for a moment (a rename in progress): keep the users
        self._stamp = stamp
        try:
            self.passwords = PasswordFile.load(self.passwords.path)
        except ValueError as e:
            log.warning("password file changed but cannot be used (users kept): %s", e)
            return
        self._known.clear()
        log.info("password file re-read: %d user(s)", len(self.passwords.users))

    def _check(self, header: str) -> User | None:
        method, _, value = header.partition(" ")
        if method.lower() == "bearer":
            return self.passwords.by_token(value.strip())
        if method.lower() != "basic":
            return None
        try:
            user, sep, password = (
                base64.b64decode(value.strip(), validate=True).decode().partition(":")
            )
        except (binascii.Error, UnicodeDecodeError):
            return None
        found = self.passwords.authenticate(user, password) if sep else None
        return None if found is None or found.is_token else found

    async def authenticate(self, header: str) -> User | None:
        if not header:
            return None
        self._reload_if_changed()
        key = hashlib.sha256(header.encode()).digest()
        user = self._known.get(key)
        if user is None:
            user = await asyncio.to_thread(self._check, header)
            if user is not None:
                if len(self._known) >= CACHE_ENTRIES:
                    self._known.clear()
                self._known[key] = user
        return user

    async def delegation_token(self, header: str, scope: str, stream: str, access: int) -> str:
        user = await self.authenticate(header)
        if user is None or self.signer is None:
            raise PermissionDenied("not authenticated" if user is None else "tokens are off")
        acl = await self.acl_of(user)
        if scope:
            resource = f"prn::/scope:{scope}" + (f"/stream:{stream}" if stream else "")
            needed = _ACCESS.get(access, Permission.READ)
            have = grants_for(user.name, acl).permission(resource)
            if have < needed:
                raise PermissionDenied(f"{user.name} has {have.name} on {resource}")
        return self.signer.issue(user.name, acl, self.ttl_s, time.time())

    async def acl_of(self, user: User) -> dict[str, Permission]:
        """The password file's ACL, overridden per resource by the ACL table."""
        acl = dict(user.acl)
        if self.acls is not None:
            acl.update(await self.acls.acl_of(user.name))
        return acl

    async def grpc_token(self, request: Any, context: Any) -> str:
        """``getDelegationToken(StreamInfo)`` for the controller's servicer."""
        header = header_of(context.invocation_metadata())
        try:
            return await self.delegation_token(
                header, request.scope, request.stream, request.accessOperation
            )
        except PermissionDenied as e:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, str(e))
            raise  # abort raises; this line is for the type checker


def header_of(metadata: Any) -> str:
    for key, value in metadata or ():
        if key == "authorization":
            return str(value)
    return ""


class AuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Refuses every RPC whose caller does not authenticate."""

    def __init__(self, auth: ControllerAuth) -> None:
        self.auth = auth

        def denial(why: str) -> Any:
            async def deny(request: Any, context: Any) -> None:
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, why)

            return grpc.unary_unary_rpc_method_handler(deny)

        self._deny = denial("authentication required")
        # Credentials given but not accepted: say so, not which part was wrong.
        self._deny_bad = denial("wrong user name, password or token")

    async def intercept_service(
        self,
        continuation: Callable[[Any], Awaitable[Any]],
        handler_call_details: Any,
    ) -> Any:
        header = header_of(handler_call_details.invocation_metadata)
        user = await self.auth.authenticate(header)
        if user is None:
            return self._deny_bad if header else self._deny
        handler = await continuation(handler_call_details)
        method = str(handler_call_details.method).rsplit("/", 1)[-1]
        if handler is None or handler.unary_unary is None or method in UNCHECKED:
            return handler
        return grpc.unary_unary_rpc_method_handler(
            self._checked(user, method, handler.unary_unary),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def _checked(
        self, user: User, method: str, inner: Callable[[Any, Any], Awaitable[Any]]
    ) -> Callable[[Any, Any], Awaitable[Any]]:
        """``inner`` behind the permission ``controller_rules`` asks for."""
        auth = self.auth

        async def checked(request: Any, context: Any) -> Any:
            rule = required(method, request)
            if rule is None and method not in FILTERED:
                return await inner(request, context)
            acl = await auth.acl_of(user)
            if rule is not None:
                resource, needed = rule
                have = grants_for(user.name, acl).permission(resource)
                if have < needed:
                    await context.abort(
                        grpc.StatusCode.PERMISSION_DENIED,
                        f"{user.name} has {have.name} on {resource}, {needed.name} needed",
                    )
            reset = _VISIBILITY.set(Visibility(user.name, acl) if method in FILTERED else None)
            try:
                return await inner(request, context)
            finally:
                _VISIBILITY.reset(reset)

        return checked
