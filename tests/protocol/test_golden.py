"""The golden examples of section 14 of the wire-protocol reference, transcribed byte for
byte: each decodes to the documented fields and encodes back to the same bytes.
Also the modified-UTF-8 vector of section 3.2 and the lenient decoding rules for strings.
"""

from __future__ import annotations

import uuid

import pytest
from segmentstore_client.errors import LocalProtocolError, MalformedCommand
from segmentstore_client.protocol import (
    NOT_EXISTS,
    NULL_ATTRIBUTE_VALUE,
    AppendBlock,
    AppendBlockEnd,
    AppendSetup,
    AuthTokenCheckFailed,
    Command,
    CreateSegment,
    DataAppended,
    FrameDecoder,
    Hello,
    KeepAlive,
    NoSuchSegment,
    ReadSegment,
    SegmentCreated,
    SegmentRead,
    SetupAppend,
    TableEntriesUpdated,
    TableEntry,
    UpdateTableEntries,
    WrongHost,
    decode,
    encode,
    encode_str,
)

from .helpers import hexbytes

W = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
SEG = "sc/st/0.#epoch.0"
# "hello" and "world!" framed as event records, 27 bytes together.
EVENTS = hexbytes(
    "00 00 00 00 00 00 00 05 68 65 6c 6c 6f  00 00 00 00 00 00 00 06 77 6f 72 6c 64 21"
)

# (section, documented frame length, hex as printed in the reference, expected command)
GOLDEN: list[tuple[str, int, str, Command]] = [
    (
        "14.1 Hello",
        16,
        "ff ff ff 81 00 00 00 08 00 00 00 11 00 00 00 05",
        Hello(17, 5),
    ),
    (
        "14.2 SetupAppend",
        52,
        """00 00 00 01 00 00 00 2c 00 00 00 00 00 00 00 01
           00 11 22 33 44 55 66 77 88 99 aa bb cc dd ee ff
           00 10 73 63 2f 73 74 2f 30 2e 23 65 70 6f 63 68
           2e 30 00 00""",
        SetupAppend(1, W, SEG, ""),
    ),
    (
        "14.3 AppendSetup",
        58,
        """00 00 00 02 00 00 00 32 00 00 00 00 00 00 00 01
           00 10 73 63 2f 73 74 2f 30 2e 23 65 70 6f 63 68
           2e 30 00 11 22 33 44 55 66 77 88 99 aa bb cc dd
           ee ff 80 00 00 00 00 00 00 00""",
        AppendSetup(1, SEG, W, NULL_ATTRIBUTE_VALUE),
    ),
    (
        "14.4 AppendBlockEnd end-only",
        79,
        """00 00 00 04 00 00 00 47 00 11 22 33 44 55 66 77
           88 99 aa bb cc dd ee ff 00 00 00 1b 00 00 00 1b
           00 00 00 00 00 00 00 05 68 65 6c 6c 6f 00 00 00
           00 00 00 00 06 77 6f 72 6c 64 21 00 00 00 02 00
           00 00 00 00 00 00 02 00 00 00 00 00 00 00 01""",
        AppendBlockEnd(W, 27, EVENTS, 2, 2, 1),
    ),
    (
        "14.5 AppendBlock",
        51,
        """00 00 00 03 00 00 00 2b 00 11 22 33 44 55 66 77
           88 99 aa bb cc dd ee ff 00 00 00 00 00 00 00 05
           68 65 6c 6c 6f 00 00 00 00 00 00 00 06 77 6f 72
           6c 64 21""",
        AppendBlock(W, EVENTS),
    ),
    (
        "14.5 AppendBlockEnd",
        52,
        """00 00 00 04 00 00 00 2c 00 11 22 33 44 55 66 77
           88 99 aa bb cc dd ee ff 00 00 00 1b 00 00 00 00
           00 00 00 02 00 00 00 00 00 00 00 02 00 00 00 00
           00 00 00 01""",
        AppendBlockEnd(W, 27, b"", 2, 2, 1),
    ),
    (
        "14.6 DataAppended",
        56,
        """00 00 00 07 00 00 00 30 00 11 22 33 44 55 66 77
           88 99 aa bb cc dd ee ff 00 00 00 00 00 00 00 02
           80 00 00 00 00 00 00 00 00 00 00 00 00 00 00 01
           00 00 00 00 00 00 00 1b""",
        DataAppended(W, 2, NULL_ATTRIBUTE_VALUE, 1, 27),
    ),
    (
        "14.7 ReadSegment",
        48,
        """00 00 00 09 00 00 00 28 00 10 73 63 2f 73 74 2f
           30 2e 23 65 70 6f 63 68 2e 30 00 00 00 00 00 00
           00 00 00 04 00 00 00 00 00 00 00 00 00 00 00 02""",
        ReadSegment(SEG, 0, 262144, "", 2),
    ),
    (
        "14.8 SegmentRead",
        75,
        """00 00 00 0a 00 00 00 43 00 10 73 63 2f 73 74 2f
           30 2e 23 65 70 6f 63 68 2e 30 00 00 00 00 00 00
           00 00 01 00 00 00 00 1b 00 00 00 00 00 00 00 05
           68 65 6c 6c 6f 00 00 00 00 00 00 00 06 77 6f 72
           6c 64 21 00 00 00 00 00 00 00 02""",
        SegmentRead(SEG, 0, True, False, EVENTS, 2),
    ),
    (
        "14.9 CreateSegment",
        49,
        """00 00 00 14 00 00 00 29 00 00 00 00 00 00 00 03
           00 10 73 63 2f 73 74 2f 30 2e 23 65 70 6f 63 68
           2e 30 00 00 00 00 00 00 00 00 00 00 00 00 00 00
           00""",
        CreateSegment(3, SEG, 0, 0, "", 0),
    ),
    (
        "14.10 UpdateTableEntries",
        73,
        """00 00 00 4a 00 00 00 41 00 00 00 00 00 00 00 04
           00 0d 73 63 2f 5f 74 61 62 6c 65 73 2f 74 31 00
           00 00 00 00 01 00 00 00 0e 00 00 00 02 6b 31 ff
           ff ff ff ff ff ff ff 00 00 00 06 00 00 00 02 76
           31 ff ff ff ff ff ff ff ff""",
        UpdateTableEntries(4, "sc/_tables/t1", "", (TableEntry(b"k1", b"v1", NOT_EXISTS),), -1),
    ),
    (
        "14.10 TableEntriesUpdated",
        28,
        """00 00 00 4b 00 00 00 14 00 00 00 00 00 00 00 04
           00 00 00 01 00 00 00 00 00 00 00 00""",
        TableEntriesUpdated(4, (0,)),
    ),
    (
        "14.11 WrongHost",
        38,
        """00 00 00 32 00 00 00 1e 00 00 00 00 00 00 00 05
           00 10 73 63 2f 73 74 2f 30 2e 23 65 70 6f 63 68
           2e 30 00 00 00 00""",
        WrongHost(5, SEG, "", ""),
    ),
    ("14.12 KeepAlive", 8, "00 00 00 64 00 00 00 00", KeepAlive()),
    (
        "14.12 AuthTokenCheckFailed",
        22,
        """00 00 00 3c 00 00 00 0e 00 00 00 00 00 00 00 06
           00 00 00 00 00 01""",
        AuthTokenCheckFailed(6, "", 1),
    ),
    (
        "14.12 NoSuchSegment",
        44,
        """00 00 00 35 00 00 00 24 00 00 00 00 00 00 00 02
           00 10 73 63 2f 73 74 2f 30 2e 23 65 70 6f 63 68
           2e 30 00 00 00 00 00 00 00 00 00 00""",
        NoSuchSegment(2, SEG, "", 0),
    ),
]


@pytest.mark.parametrize(("section", "size", "hx", "command"), GOLDEN, ids=[g[0] for g in GOLDEN])
def test_golden_example(section: str, size: int, hx: str, command: Command) -> None:
    frame = hexbytes(hx)
    assert len(frame) == size
    decoded = decode(frame)
    assert type(decoded) is type(command)
    assert decoded == command
    assert getattr(decoded, "wire_omitted", 0) == 0  # every golden frame has the full layout
    assert encode(decoded) == frame
    assert encode(command) == frame


def test_golden_examples_as_one_stream() -> None:
    stream = b"".join(hexbytes(g[2]) for g in GOLDEN)
    commands = FrameDecoder().feed(stream)
    assert commands == [g[3] for g in GOLDEN]


def test_golden_field_values() -> None:
    """Spot checks that the dataclass fields carry the documented meaning, not just order."""
    ack = decode(hexbytes(GOLDEN[6][2]))
    assert isinstance(ack, DataAppended)
    assert ack.writer_id == W
    assert ack.event_number == 2
    assert ack.previous_event_number == -(2**63)
    assert ack.request_id == 1
    assert ack.current_segment_write_offset == 27
    read = decode(hexbytes(GOLDEN[8][2]))
    assert isinstance(read, SegmentRead)
    assert (read.segment, read.offset, read.at_tail, read.end_of_segment) == (SEG, 0, True, False)
    assert bytes(read.data) == EVENTS
    assert read.request_id == 2
    create = decode(hexbytes(GOLDEN[9][2]))
    assert isinstance(create, CreateSegment)
    assert (create.target_rate, create.scale_type, create.rollover_size_bytes) == (0, 0, 0)


# --- strings (3.2) ----------------------------------------------------------------------

MUTF8_TEXT = "A\x00é€\U0001f600"
MUTF8 = hexbytes("00 0e 41 c0 80 c3 a9 e2 82 ac ed a0 bd ed b8 80")
# The same text in standard UTF-8 (4-byte form of U+1F600, raw 00 for NUL): what the Rust
# client sends. The reference says to accept it.
STD_UTF8 = hexbytes("00 0b 41 00 c3 a9 e2 82 ac f0 9f 98 80")


def _segment_created(string_field: bytes) -> bytes:
    payload = (7).to_bytes(8, "big") + string_field
    return (21).to_bytes(4, "big") + len(payload).to_bytes(4, "big") + payload


def test_modified_utf8_vector_encodes() -> None:
    assert encode_str(MUTF8_TEXT) == MUTF8
    assert encode(SegmentCreated(7, MUTF8_TEXT)) == _segment_created(MUTF8)


def test_modified_utf8_vector_decodes() -> None:
    assert decode(_segment_created(MUTF8)) == SegmentCreated(7, MUTF8_TEXT)


def test_standard_utf8_four_byte_form_decodes() -> None:
    assert STD_UTF8[2:] == MUTF8_TEXT.encode("utf-8")
    decoded = decode(_segment_created(STD_UTF8))
    assert decoded == SegmentCreated(7, MUTF8_TEXT)
    # Written back, it takes the modified form (what a Java peer requires).
    assert encode(decoded) == _segment_created(MUTF8)


@pytest.mark.parametrize(
    ("body", "text"),
    [
        (b"", ""),
        (b"plain ascii", "plain ascii"),
        (b"\xc1\x81", "A"),  # overlong 2-byte form, accepted as Java does
        (b"\xed\xa0\xbd", "\ud83d"),  # a lone surrogate half survives
        (b"\xf4\x8f\xbf\xbf", "\U0010ffff"),  # largest code point, standard UTF-8
    ],
)
def test_lenient_string_decoding(body: bytes, text: str) -> None:
    frame = _segment_created(len(body).to_bytes(2, "big") + body)
    assert decode(frame) == SegmentCreated(7, text)


@pytest.mark.parametrize(
    "body",
    [
        b"\x80",  # continuation byte as lead byte
        b"\xbf",
        b"\xf8\x80\x80\x80\x80",  # 5-byte lead
        b"\xff",
        b"a\xc3",  # 2-byte sequence cut by the end of the string
        b"\xc3\x41",  # bad continuation byte
        b"\xe2\x82",  # 3-byte sequence cut short
        b"\xe2\x41\x82",
        b"\xf0\x9f\x98",  # 4-byte sequence cut short
        b"\xf0\x9f\x41\x80",
        b"\xf4\x90\x80\x80",  # above U+10FFFF
        b"\xf0\x8f\xbf\xbf",  # overlong 4-byte form of a BMP character
    ],
)
def test_malformed_strings_are_rejected(body: bytes) -> None:
    frame = _segment_created(len(body).to_bytes(2, "big") + body)
    with pytest.raises(MalformedCommand):
        decode(frame)
    with pytest.raises(MalformedCommand):
        FrameDecoder().feed(frame)


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("a" * 65535, 65535),
        ("é" * 32767 + "a", 65535),
        ("€" * 21845, 65535),
        ("\x00" * 32767 + "a", 65535),
        ("\U0001f600" * 10922 + "abc", 65535),
    ],
)
def test_string_at_the_limit_encodes(text: str, size: int) -> None:
    enc = encode_str(text)
    assert len(enc) == 2 + size
    assert enc[:2] == b"\xff\xff"
    assert decode(encode(SegmentCreated(1, text))) == SegmentCreated(1, text)


@pytest.mark.parametrize(
    "text",
    ["a" * 65536, "é" * 32768, "€" * 21846, "\x00" * 32768, "\U0001f600" * 10923],
)
def test_string_over_the_limit_is_a_local_error(text: str) -> None:
    with pytest.raises(LocalProtocolError):
        encode_str(text)
    with pytest.raises(LocalProtocolError):
        encode(SegmentCreated(1, text))
