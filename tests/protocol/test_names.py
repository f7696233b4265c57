"""The shared segment-name rule: what is refused, and that accepted names survive encoding."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from segmentstore_client.protocol.names import (
    MAX_NAME_BYTES,
    InvalidName,
    check_name,
    decode_name,
    encode_name,
    name_problem,
    wire_length,
)
from segmentstore_client.protocol.primitives import encode_str


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("", "empty"),
        ("a\x00b", "U+0000"),
        ("tab\there", "U+0009"),
        ("del\x7f", "U+007F"),
        ("x" * (MAX_NAME_BYTES + 1), "longer than"),
        ("\u00e9" * (MAX_NAME_BYTES // 2 + 1), "longer than"),
    ],
)
def test_refused_names_say_why(name: str, reason: str) -> None:
    problem = name_problem(name)
    assert problem is not None and reason in problem
    with pytest.raises(InvalidName, match="invalid segment name"):
        check_name(name)


@pytest.mark.parametrize(
    "name",
    ["ok/\udc80", "ok/\ud800", "scope/stream/0.#epoch.0", "\U0001f600", "x" * MAX_NAME_BYTES],
)
def test_accepted_names_round_trip(name: str) -> None:
    assert check_name(name) == name
    assert decode_name(encode_name(name)) == name


@given(st.text(alphabet=st.characters(codec=None, blacklist_categories=("Cc",)), max_size=64))
def test_wire_length_matches_the_codec(name: str) -> None:
    assert wire_length(name) == len(encode_str(name)) - 2
