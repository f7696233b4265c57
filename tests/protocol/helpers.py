"""Loading the official-client byte traces, and small helpers shared by the codec tests.

The traces are vendored in ``tests/protocol/vectors/`` (a copy of
``../shared/protocol/vectors/`` without the gRPC file ``official-client-controller.hex``) so
that the suite runs on a clean clone. ``SEGMENTSTORE_VECTORS`` points elsewhere if set.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from segmentstore_client.protocol import Buffer, Command, FrameDecoder

HERE = Path(__file__).resolve().parent
VECTORS = Path(os.environ.get("SEGMENTSTORE_VECTORS", HERE / "vectors"))
SHARED_VECTORS = HERE.parents[2] / "shared" / "protocol" / "vectors"
GRPC_TRACE = "official-client-controller.hex"

_ELIDED = re.compile(
    r"^# (C>S|S>C) (c\d+) (-?\d+) (\w+) len=(\d+) ELIDED .*"
    r"first bytes ([0-9a-f]+) \.\.\. last bytes ([0-9a-f]+)$"
)


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    direction: str  # "C>S" or "S>C"
    conn: str
    type_code: int
    name: str
    data: bytes
    rebuilt: bool = False  # an ELIDED frame rebuilt from its description

    @property
    def id(self) -> str:
        return f"{self.file.removeprefix('official-client-').removesuffix('.hex')}:{self.line}"


def hexbytes(text: str) -> bytes:
    """Bytes from hex written with any whitespace (as the reference prints frames)."""
    return bytes.fromhex("".join(text.split()))


def trace_files() -> list[Path]:
    files = sorted(p for p in VECTORS.glob("*.hex") if p.name != GRPC_TRACE)
    if not files:
        raise FileNotFoundError(f"no trace files in {VECTORS}")
    return files


def load_frames(path: Path, rebuild_elided: bool = True) -> list[Frame]:
    """Every frame line of one trace, in file order (elided frames rebuilt if asked)."""
    frames: list[Frame] = []
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        if line.startswith("#"):
            m = _ELIDED.match(line)
            if m and rebuild_elided:
                direction, conn, type_code, name, length, first, last = m.groups()
                data = rebuild_large_event_frame(int(length))
                if not (
                    data.startswith(bytes.fromhex(first)) and data.endswith(bytes.fromhex(last))
                ):
                    raise ValueError(f"{path.name}:{lineno}: rebuilt frame does not match")
                frames.append(
                    Frame(path.name, lineno, direction, conn, int(type_code), name, data, True)
                )
            continue
        if not line.strip():
            continue
        direction, conn, type_code, name, hx = line.split()
        frames.append(
            Frame(path.name, lineno, direction, conn, int(type_code), name, bytes.fromhex(hx))
        )
    return frames


def all_frames(rebuild_elided: bool = True) -> list[Frame]:
    return [f for p in trace_files() for f in load_frames(p, rebuild_elided)]


# The large-event trace elides its two ConditionalBlockEnd frames; its header comment gives
# the layout: the framed 9 MiB event (EVENT header + 9437184 bytes of 0x78) cut into an
# 8 MiB piece and the rest, event numbers 0 and 1, request ids 0x87 and 0x88.
LARGE_EVENT_WRITER = bytes.fromhex("d7eb673e9085de6b17421e5a2edaa86f")
LARGE_EVENT_SIZE = 9437184
_PIECE = 8 * 1024 * 1024


def rebuild_large_event_frame(payload_length: int) -> bytes:
    record = b"\x00\x00\x00\x00" + LARGE_EVENT_SIZE.to_bytes(4, "big") + b"x" * LARGE_EVENT_SIZE
    pieces = {
        8388652: (0, 0, record[:_PIECE], 0x87),
        1048628: (1, _PIECE, record[_PIECE:], 0x88),
    }
    event_number, expected_offset, data, request_id = pieces[payload_length]
    payload = b"".join(
        (
            LARGE_EVENT_WRITER,
            event_number.to_bytes(8, "big"),
            expected_offset.to_bytes(8, "big"),
            len(data).to_bytes(4, "big"),
            data,
            request_id.to_bytes(8, "big"),
        )
    )
    assert len(payload) == payload_length
    return (89).to_bytes(4, "big") + payload_length.to_bytes(4, "big") + payload


def streams(frames: Sequence[Frame]) -> dict[tuple[str, str, str], list[Frame]]:
    """Frames grouped into byte streams: (file, connection, direction) in file order."""
    out: dict[tuple[str, str, str], list[Frame]] = {}
    for f in frames:
        out.setdefault((f.file, f.conn, f.direction), []).append(f)
    return out


def random_cuts(data: bytes, rng: random.Random, max_chunk: int) -> Iterator[memoryview]:
    """``data`` in consecutive pieces of random size 1..max_chunk (small sizes favoured)."""
    mv = memoryview(data)
    pos = 0
    while pos < len(mv):
        size = rng.randint(1, 16) if rng.random() < 0.5 else rng.randint(1, max_chunk)
        yield mv[pos : pos + size]
        pos += size


def fixed_cuts(data: bytes, size: int) -> Iterator[memoryview]:
    mv = memoryview(data)
    for pos in range(0, len(mv), size):
        yield mv[pos : pos + size]


def feed_all(decoder: FrameDecoder, chunks: Iterator[Buffer]) -> list[Command]:
    out: list[Command] = []
    for chunk in chunks:
        out.extend(decoder.feed(chunk))
    return out
