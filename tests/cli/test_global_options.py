"""Options before the subcommand (``segmentstore --endpoint X segment list``): parsed in
this process, and once each as a subprocess against a real server."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

import pytest

from segmentstore import cli
from segmentstore.commands import _cli

from .conftest import run_cli

if TYPE_CHECKING:
    from conftest import ServerProcess  # tests/conftest.py


def parse(*argv: str) -> argparse.Namespace:
    return cli._parse(list(argv))


def test_the_option_after_the_subcommand_wins() -> None:
    assert parse("--endpoint", "tcp://a:1", "segment", "list").endpoint == "tcp://a:1"
    args = parse("--endpoint", "tcp://a:1", "segment", "list", "--endpoint", "tcp://b:2")
    assert args.endpoint == "tcp://b:2"
    args = parse("--endpoint", "tcp://a:1", "segment", "--endpoint", "tcp://b:2", "info", "x/0")
    assert args.endpoint == "tcp://b:2"
    args = parse("--timeout", "3", "-q", "--debug", "table", "ls", "t/1")
    assert (args.timeout, args.quiet, args.debug) == (3.0, True, True)
    args = parse("--controller", "tcp://c:9", "stream", "cut", "a/b")
    assert _cli.controller(args) == "tcp://c:9"
    args = parse("--controller", "tcp://c:9", "scope", "list", "--controller", "tcp://d:9")
    assert _cli.controller(args) == "tcp://d:9"
    for argv in (("import", "kafka-log", "f.log", "--segment", "s/0"), ("relay-schema", "s", "f")):
        assert parse("--endpoint", "tcp://a:1", *argv).endpoint == "tcp://a:1"
    # no marker or top-level copy is left for the handler (serve passes vars() on)
    assert not {k for k in vars(args) if k.endswith("_") or k.startswith("top_")}


def test_json_before_the_subcommand() -> None:
    assert parse("--json", "segment", "info", "x/0").json is True
    assert parse("segment", "info", "x/0").json is False
    assert parse("--json", "stream", "info", "a/b").json is True
    assert parse("--json", "health").json is True


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--json", "segment", "write", "x/0", "e"), "`segment write` has no JSON output"),
        (("--endpoint", "tcp://a:1", "serve"), "--endpoint does not apply to `serve`"),
        (("--quiet", "check", "/tmp/d"), "--quiet does not apply to `check`"),
        (("--controller", "tcp://c:9", "check", "/tmp/d"), "--controller does not apply"),
        (("--user", "u", "passwd", "f", "u"), "--user does not apply to `passwd`"),
    ],
)
def test_options_a_subcommand_does_not_take_are_usage_errors(
    argv: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        parse(*argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_the_environment_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_cli.ENDPOINT_ENV, "tcp://env:1")
    monkeypatch.setenv(_cli.CONTROLLER_ENV, "tcp://envc:1")
    assert _cli.endpoint(parse("segment", "list")) == "tcp://env:1"
    assert _cli.endpoint(parse("--endpoint", "tcp://a:1", "segment", "list")) == "tcp://a:1"
    assert _cli.controller(parse("stream", "list", "s")) == "tcp://envc:1"
    monkeypatch.delenv(_cli.ENDPOINT_ENV)
    assert _cli.endpoint(parse("segment", "list")) == _cli.DEFAULT_ENDPOINT


def test_help_says_which_wins() -> None:
    text = " ".join(cli._parser().format_help().split())
    assert "also accepted after the subcommand (where they win when given in both places)" in text


def test_before_and_after_against_a_real_server(module_server: ServerProcess, segment: str) -> None:
    good, refused = module_server.endpoint, "tcp://127.0.0.1:1"
    assert run_cli("segment", "create", segment, endpoint=good).returncode == 0
    # before the subcommand beats the environment
    r = run_cli("--endpoint", good, "--json", "segment", "info", segment, endpoint=refused)
    assert r.returncode == 0 and json.loads(r.stdout)["segment"] == segment
    # after the subcommand beats before it
    r = run_cli("--endpoint", refused, "segment", "info", segment, "--endpoint", good)
    assert r.returncode == 0 and segment in r.stdout.decode()
    r = run_cli("--endpoint", refused, "segment", "info", segment, endpoint=good)
    assert r.returncode == 3 and r.stderr.count(b"\n") == 1
