"""Every controller message the official client sent (and every reply it accepted) in
``shared/protocol/vectors/official-client-controller.hex`` parses with this project's
``.proto`` with no unknown field and re-encodes to the same bytes: our field numbers and
types are the client's."""

from __future__ import annotations

from pathlib import Path

from google.protobuf import message_factory
from segmentstore_client.controller_proto import controller_pb2 as pb

# A copy of shared/protocol/vectors/official-client-controller.hex (see its README).
FILE = Path(__file__).with_name("vectors") / "official-client-controller.hex"

SERVICE = pb.DESCRIPTOR.services_by_name["ControllerService"]


def _lines() -> list[tuple[str, str, bytes]]:
    out = []
    for line in FILE.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        parts = line.split(" ")
        direction, rpc = parts[0], parts[2]
        out.append((direction, rpc, bytes.fromhex(parts[3]) if len(parts) > 3 else b""))
    return out


def test_every_captured_controller_message_round_trips() -> None:
    lines = _lines()
    assert len(lines) > 100
    rpcs = set()
    for direction, rpc, raw in lines:
        method = SERVICE.methods_by_name[rpc]  # every method the client called is served
        desc = method.input_type if direction == "C>S" else method.output_type
        msg = message_factory.GetMessageClass(desc)()
        msg.ParseFromString(raw)
        known = message_factory.GetMessageClass(desc)()
        known.CopyFrom(msg)
        known.DiscardUnknownFields()
        assert known.SerializeToString(deterministic=True) == raw, (direction, rpc, raw.hex())
        rpcs.add(rpc)
    assert {
        "createScope",
        "createStream",
        "getURI",
        "createTransaction",
        "getEpochSegments",
    } <= rpcs
