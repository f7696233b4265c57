"""In-process checks of the CLI's pure parts: the exit-code table, the safe text
rendering, the JSON event form and the help text of every subcommand."""

from __future__ import annotations

import argparse
import inspect
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from segmentstore_client import errors as E

from segmentstore import cli
from segmentstore.commands import _cli, _render


def test_every_sdk_error_has_its_own_exit_code() -> None:
    sdk_errors = [
        c
        for _, c in inspect.getmembers(E, inspect.isclass)
        if issubclass(c, E.SegmentStoreError) and c.__module__ == E.__name__
    ]
    for cls in sdk_errors:
        code = _cli.exit_code(cls.__new__(cls))
        assert code not in (_cli.Exit.OK, _cli.Exit.INTERNAL), cls
    # the kinds the issue names are told apart
    kinds = {
        E.NoSuchSegment: 4,
        E.ConnectFailed: 3,
        E.SegmentSealed: 6,
        E.SegmentAlreadyExists: 5,
        E.SegmentTruncated: 7,
        E.TableKeyBadVersion: 8,
        E.Timeout: 10,
        E.ConnectionLost: 11,
        E.CorruptData: 12,
        E.WrongHost: 13,
        E.AuthenticationFailed: 15,
    }
    for cls, code in kinds.items():
        assert _cli.exit_code(cls("x")) == code, cls
    assert len(set(kinds.values())) == len(kinds)
    assert _cli.exit_code(_cli.CliError("x", 9)) == 9
    assert _cli.exit_code(FileNotFoundError(2, "No such file", "f")) == _cli.Exit.LOCAL_IO
    assert _cli.exit_code(ZeroDivisionError()) == _cli.Exit.INTERNAL


def test_one_line_drops_server_stack_traces() -> None:
    err = E.InvalidArgument("server refused the request: boom\n  at Foo.bar\n  at Baz")
    assert _cli.one_line(err) == "server refused the request: boom"
    assert _cli.one_line(FileNotFoundError(2, "No such file", "x.lp")) == "x.lp: No such file"


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (b"plain ascii", "plain ascii"),
        ("wörld ✓".encode(), "wörld ✓"),
        (b"a\nb\tc\rd", "a\\nb\\tc\\rd"),
        (b"\x1b[2J\x00\x7f", "\\x1b[2J\\x00\\x7f"),
        (b"back\\slash", "back\\\\slash"),
        (b"\xff\xfe", "\\xff\\xfe"),
        ("line\u2028sep\u0085".encode(), "line\\u2028sep\\u0085"),
        ("rtl\u202eevil".encode(), "rtl\\u202eevil"),
        (b"", ""),
    ],
)
def test_text_line_is_one_safe_line(data: bytes, text: str) -> None:
    assert _render.text_line(data) == text


@given(st.binary(max_size=64))
def test_text_line_never_breaks_a_line_or_prints_controls(data: bytes) -> None:
    text = _render.text_line(data)
    assert len(text.splitlines()) <= 1
    assert all(ch.isprintable() or ch == " " for ch in text)


@given(st.binary(max_size=64), st.integers(0, 2**62))
def test_event_json_round_trips(data: bytes, offset: int) -> None:
    line = _render.event_json(offset, data)
    assert "\n" not in line and line.isascii()
    obj = json.loads(line)
    assert obj["offset"] == offset and obj["next_offset"] == offset + 8 + len(data)
    assert _render.event_from_json(line, "here") == data


def test_aligned_pads_columns_and_right_aligns_numbers() -> None:
    out = _render.aligned(("NAME", "N"), [("a", 5), ("long-name", 12345)])
    assert out.splitlines() == ["NAME           N", "a              5", "long-name  12345"]


def _leaves(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> list[tuple[str, ...]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.extend(_leaves(sub, (*path, name)))
    return found or [path]


# Commands that talk to no server: shell completion and the offline data-dir tools.
OFFLINE = {("completion",), ("check",), ("repair",), ("passwd",)}  # passwd edits a file


def test_every_subcommand_has_examples_in_its_help() -> None:
    parser = cli._parser()
    leaves = _leaves(parser, ())
    assert ("segment", "tail") in leaves
    for path in leaves:
        if path == ("serve",):
            continue
        sub = parser
        for name in path:
            action = next(a for a in sub._actions if isinstance(a, argparse._SubParsersAction))
            sub = action.choices[name]
        help_text = sub.format_help()
        assert "\nexamples:\n  " in help_text, path
        assert "segmentstore " + " ".join(path) in help_text.split("\nexamples:\n")[1], path
        if path not in OFFLINE:
            assert "--endpoint" in help_text, path


def test_messages_for_people_escape_what_is_not_printable() -> None:
    assert _cli.printable("deleted rtl\u202eevil/0") == "deleted rtl\\u202eevil/0"
    assert _cli.printable("plain wörld") == "plain wörld"
    assert _cli.printable("\U000e0001tag") == "\\U000e0001tag"
