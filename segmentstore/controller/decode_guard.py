"""A gRPC server interceptor that answers a request whose bytes are not its message.

Contract: for every unary-unary method, the request deserializer is wrapped so that bytes
protobuf cannot parse (garbage, a string field that is not UTF-8) become a marker instead
of an exception; the method then answers INVALID_ARGUMENT naming the method, and the
servicer never sees the request. Without it grpc logs a traceback per such request and
answers UNKNOWN. Other handlers pass through unchanged.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import DecodeError  # type: ignore[import-untyped]


@dataclass(frozen=True, slots=True)
class _Undecodable:
    reason: str


class DecodeGuard(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], details: Any
    ) -> Any:
        handler = await continuation(details)
        if handler is None or handler.unary_unary is None or handler.request_deserializer is None:
            return handler
        decode, behavior, method = handler.request_deserializer, handler.unary_unary, details.method

        def safe(data: bytes) -> Any:
            try:
                return decode(data)
            except (DecodeError, UnicodeDecodeError) as e:
                return _Undecodable(str(e))

        async def guarded(request: Any, context: Any) -> Any:
            if isinstance(request, _Undecodable):
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"{method}: not a valid request message ({request.reason})",
                )
            return await behavior(request, context)

        return handler._replace(request_deserializer=safe, unary_unary=guarded)
