"""The two protobuf messages of the controller's ``getDelegationToken`` RPC, by hand.

Contract: ``encode_stream_info`` writes Pravega's ``StreamInfo`` (scope = 1, stream = 2,
accessOperation = 3, proto3: zero/empty fields omitted); ``decode_delegation_token``
reads ``DelegationToken`` (delegationToken = 1) and skips unknown fields; a truncated or
malformed message raises ``ValueError``. The SDK needs only these two, so it does not
carry the controller's generated stubs.
"""

from __future__ import annotations

from typing import Final

GET_DELEGATION_TOKEN: Final = (
    "/io.pravega.controller.stream.api.grpc.v1.ControllerService/getDelegationToken"
)
ACCESS_READ: Final = 3
ACCESS_READ_WRITE: Final = 5


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(data: bytes, i: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        if i >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        byte = data[i]
        i += 1
        n |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return n, i


def encode_stream_info(scope: str, stream: str, access: int = 0) -> bytes:
    out = bytearray()
    for number, text in ((1, scope), (2, stream)):
        if text:
            raw = text.encode()
            out += _varint(number << 3 | 2) + _varint(len(raw)) + raw
    if access:
        out += _varint(3 << 3) + _varint(access)
    return bytes(out)


def decode_delegation_token(data: bytes) -> str:
    token = ""
    i = 0
    while i < len(data):
        key, i = _read_varint(data, i)
        wire = key & 7
        if wire == 0:
            _, i = _read_varint(data, i)
        elif wire == 2:
            size, i = _read_varint(data, i)
            if i + size > len(data):
                raise ValueError("truncated field")
            if key >> 3 == 1:
                token = data[i : i + size].decode()
            i += size
        elif wire in (1, 5):
            i += 8 if wire == 1 else 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
    if i != len(data):
        raise ValueError("truncated message")
    return token
