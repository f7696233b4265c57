"""Shared plumbing of the client subcommands (``segment``, ``table``, ``health``, ``bench``).

Contract: every client subcommand takes the global options ``--endpoint`` (or
``SEGMENTSTORE_ENDPOINT``), ``--timeout`` and ``--debug`` (added by :func:`add_leaf`) and
runs its body through :func:`run`, which turns every failure into one line on stderr
and the exit code that :data:`EXIT_CODES` assigns to its kind. A Python traceback is
printed only with ``--debug``. Scope and stream commands plug in the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import logging
import os
import sys
import traceback
from collections.abc import Awaitable, Callable
from typing import IO, Any, Final

import segmentstore_client as sc
from segmentstore_client import errors as E
from segmentstore_client.protocol.names import name_problem
from segmentstore_client.streams import NoSuchStream, StreamExists

DEFAULT_ENDPOINT: Final = "tcp://127.0.0.1:12345"
ENDPOINT_ENV: Final = "SEGMENTSTORE_ENDPOINT"
CONTROLLER_ENV: Final = "SEGMENTSTORE_CONTROLLER"
TLS_CA_ENV: Final = "SEGMENTSTORE_TLS_CA_FILE"
PASSWORD_ENV: Final = "SEGMENTSTORE_PASSWORD"
TOKEN_ENV: Final = "SEGMENTSTORE_TOKEN"
DEFAULT_TIMEOUT: Final = 10.0


class Exit:
    """Exit codes: one per kind of failure, so scripts can tell them apart."""

    OK = 0
    FAILED = 1  # a check failed (health), or a generic failure
    USAGE = 2  # bad arguments or option values (argparse uses 2 as well)
    UNREACHABLE = 3  # no connection could be opened (refused, unknown host, timeout)
    NOT_FOUND = 4  # the segment or table does not exist
    EXISTS = 5  # the segment or table already exists
    SEALED = 6  # the segment is sealed
    TRUNCATED = 7  # the offset lies outside the readable range
    CONFLICT = 8  # a condition failed (key version, expected offset, writer fenced, not empty)
    NO_KEY = 9  # the table key does not exist
    TIMEOUT = 10  # the server did not answer in time
    CONNECTION_LOST = 11  # the connection broke while a request was outstanding
    BAD_DATA = 12  # data or an input file does not parse (damaged, not records, too large)
    SERVER = 13  # any other refusal from the server, or an incompatible server
    LOCAL_IO = 14  # a local file could not be read or written
    AUTH = 15  # credentials missing or refused, or not allowed to do this
    INTERNAL = 70  # a bug: an unexpected exception (run with --debug for the traceback)
    INTERRUPTED = 130  # Ctrl-C
    PIPE = 141  # stdout was closed early (``| head``): silent, as for SIGPIPE


class CliError(Exception):
    """A failure the command reports as one line with ``code``."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


# Most specific first: the first class the error is an instance of decides its code
# (a CliError carries its own).
EXIT_CODES: Final[tuple[tuple[type[BaseException], int], ...]] = (
    (E.ConnectFailed, Exit.UNREACHABLE),
    (E.ConnectionLost, Exit.CONNECTION_LOST),
    (E.Timeout, Exit.TIMEOUT),
    (E.NoSuchSegment, Exit.NOT_FOUND),
    (NoSuchStream, Exit.NOT_FOUND),
    (E.SegmentAlreadyExists, Exit.EXISTS),
    (StreamExists, Exit.EXISTS),
    (E.SegmentSealed, Exit.SEALED),
    (E.SegmentTruncated, Exit.TRUNCATED),
    (E.TableKeyDoesNotExist, Exit.CONFLICT),
    (E.TableConditionFailed, Exit.CONFLICT),
    (E.ConditionalCheckFailed, Exit.CONFLICT),
    (E.AttributeConflict, Exit.CONFLICT),
    (E.WriterFenced, Exit.CONFLICT),
    (E.TableNotEmpty, Exit.CONFLICT),
    (E.AuthenticationFailed, Exit.AUTH),
    (E.CorruptData, Exit.BAD_DATA),  # FormatError (formats) is a CorruptRecord
    (E.CorruptRecord, Exit.BAD_DATA),
    (E.EventTooLarge, Exit.BAD_DATA),
    (E.CodecUnavailable, Exit.BAD_DATA),
    (E.SegmentStoreError, Exit.SERVER),
    (OSError, Exit.LOCAL_IO),
)


def exit_code(error: BaseException) -> int:
    """The exit code for ``error`` (see :class:`Exit`)."""
    if isinstance(error, CliError):
        return error.code
    for cls, code in EXIT_CODES:
        if isinstance(error, cls):
            return code
    return Exit.INTERNAL


def one_line(error: BaseException) -> str:
    """The error as one line: the server's stack trace and any later lines dropped."""
    text = str(error).strip() or type(error).__name__
    first = text.splitlines()[0]
    if isinstance(error, E.SegmentStoreError | CliError):
        return first
    if isinstance(error, OSError) and error.filename is not None:
        return f"{error.filename}: {error.strerror or first}"
    return f"{type(error).__name__}: {first}"


# -- parsers -----------------------------------------------------------------------------


def examples(*lines: str) -> str:
    """An ``epilog`` listing example command lines."""
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


TOP_LEVEL_NOTE: Final = (
    "options of the client subcommands, also accepted after the subcommand (where they "
    "win when given in both places)"
)


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


# The global options: (flags, dest, add_argument keywords); every default is SUPPRESS.
GLOBAL_OPTIONS: Final[tuple[tuple[tuple[str, ...], str, dict[str, Any]], ...]] = (
    (
        ("--endpoint",),
        "endpoint",
        {
            "metavar": "URI",
            "help": f"segment store to talk to (default ${ENDPOINT_ENV} or {DEFAULT_ENDPOINT})",
        },
    ),
    (
        ("--controller",),
        "controller",
        {
            "metavar": "URI",
            "help": f"the controller: streams and tokens (default ${CONTROLLER_ENV}, or the "
            "endpoint's host, port 9090)",
        },
    ),
    (
        ("--timeout",),
        "timeout",
        {
            "type": positive_float,
            "metavar": "SECONDS",
            "help": f"connect and request timeout (default {DEFAULT_TIMEOUT:g})",
        },
    ),
    (
        ("--tls-ca-file",),
        "tls_ca_file",
        {
            "metavar": "PEM",
            "help": f"CA bundle for tls:// endpoints (default ${TLS_CA_ENV}; else the system's)",
        },
    ),
    (
        ("--user",),
        "user",
        {
            "metavar": "USER",  # else the top-level copy shows its dest, TOP_USER
            "help": f"authenticate as USER; the password comes from ${PASSWORD_ENV} or a prompt",
        },
    ),
    (
        ("--token",),
        "token",
        {
            "metavar": "TOKEN",
            "help": f"authenticate with this static token (default ${TOKEN_ENV})",
        },
    ),
    (
        ("-q", "--quiet"),
        "quiet",
        {"action": "store_true", "help": "no summary lines on stderr (errors are still printed)"},
    ),
    (
        ("--debug",),
        "debug",
        {"action": "store_true", "help": "log the SDK's debug messages and print tracebacks"},
    ),
    (
        ("--json",),
        "json",
        {"action": "store_true", "help": "JSON output (the subcommands that have --json)"},
    ),
)


def add_global_options(p: argparse.ArgumentParser, *, top: bool = False) -> None:
    """:data:`GLOBAL_OPTIONS` but ``--json``; SUPPRESS defaults let the value given last
    in the command's path win (``segmentstore --endpoint X segment info``, ``segment
    --endpoint X info`` or ``segment info --endpoint X``). ``top``: the top-level
    parser's copy (dests ``top_*``), with ``--json``; :func:`apply_top_level` moves them."""
    g = p.add_argument_group(TOP_LEVEL_NOTE if top else "common options")
    for flags, dest, kw in GLOBAL_OPTIONS:
        if dest != "json" or top:
            g.add_argument(
                *flags, dest=f"top_{dest}" if top else dest, default=argparse.SUPPRESS, **kw
            )
    if not top:
        p.set_defaults(client_options_=True)


def apply_top_level(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Move the options given before the subcommand (``top_*``) to their names unless
    given after it as well (that one wins); one usage error if the subcommand does not
    take them. Drops the markers from ``args``."""
    given = vars(args)
    what = " ".join(
        str(given[k]) for k in ("command", *(k for k in given if k.endswith("_command")))
    )
    tops = {k.removeprefix("top_"): given.pop(k) for k in list(given) if k.startswith("top_")}
    top_json = tops.pop("json", False)
    client = given.pop("client_options_", False)
    for name, value in tops.items():
        if not client:
            parser.error(f"--{name.replace('_', '-')} does not apply to `{what}`")
        given.setdefault(name, value)
    if top_json:
        if "json" not in given:
            parser.error(f"--json: `{what}` has no JSON output")
        args.json = True


# Flags several commands take, for ``add_leaf(..., flags=...)``.
EXIST_OK: Final = ("--exist-ok", "no error if it exists")
MISSING_OK: Final = ("--missing-ok", "no error if it does not exist")
JSON_OBJECT: Final = ("--json", "one JSON object")


def json_lines(what: str) -> tuple[str, str]:
    """The ``--json`` flag of a command that prints one JSON object per ``what``."""
    return ("--json", f"one JSON object per {what} and line")


def _parser_with_examples(
    sub: Any, name: str, help: str, description: str, epilog: str
) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        name,
        help=help,
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return p


def add_group(
    subparsers: Any,
    name: str,
    help: str,
    description: str,
    example_lines: tuple[str, ...],
    *,
    epilog_extra: str = "",
) -> Any:
    """A subcommand with subcommands of its own (``segment``, ``table``, ...): the global
    options at its level too, an examples epilog (then
    ``epilog_extra``); returns the subparsers its leaves are added to (:func:`add_leaf`)."""
    epilog = examples(*example_lines) + (f"\n\n{epilog_extra}" if epilog_extra else "")
    p = _parser_with_examples(subparsers, name, help, description, epilog)
    add_global_options(p)
    return p.add_subparsers(dest=f"{name}_command", required=True, metavar="COMMAND")


def add_leaf(
    sub: Any,
    name: str,
    help: str,
    description: str,
    example_lines: tuple[str, ...],
    *,
    func: Callable[[argparse.Namespace], int] | None = None,
    flags: tuple[tuple[str, str], ...] = (),
) -> argparse.ArgumentParser:
    """A leaf subcommand with the global options, an examples epilog, the on/off
    ``flags`` (option, help) and ``func`` as its handler."""
    p = _parser_with_examples(sub, name, help, description, examples(*example_lines))
    add_global_options(p)
    for option, text in flags:
        p.add_argument(option, action="store_true", help=text)
    if func is not None:
        p.set_defaults(func=func)
    return p


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text!r}")
    return value


def segment_name(text: str) -> str:
    """argparse type: a valid segment (or table) name, by the one rule in names.py."""
    problem = name_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


# -- running -----------------------------------------------------------------------------


def endpoint(args: argparse.Namespace) -> str:
    return str(getattr(args, "endpoint", None) or os.environ.get(ENDPOINT_ENV) or DEFAULT_ENDPOINT)


def controller(args: argparse.Namespace) -> str:
    """The controller's URI, or "" for the SDK's default (the endpoint's host, port 9090)."""
    return str(getattr(args, "controller", None) or os.environ.get(CONTROLLER_ENV) or "")


def timeout(args: argparse.Namespace) -> float:
    return float(getattr(args, "timeout", DEFAULT_TIMEOUT))


def parsed_endpoint(args: argparse.Namespace) -> sc.Endpoint:
    try:
        return sc.Endpoint.parse(endpoint(args))
    except ValueError as e:
        raise CliError(f"bad endpoint: {e}", Exit.USAGE) from None


def credentials(args: argparse.Namespace) -> tuple[str, str] | str | None:
    """``--user`` (password from $SEGMENTSTORE_PASSWORD, else a prompt on a terminal) or
    ``--token`` / $SEGMENTSTORE_TOKEN; None without either. Asked once per command."""
    if hasattr(args, "credentials_"):
        known: tuple[str, str] | str | None = args.credentials_
        return known
    args.credentials_ = _credentials(args)
    return credentials(args)


def tls_ca_file(args: argparse.Namespace) -> str:
    """``--tls-ca-file`` or $SEGMENTSTORE_TLS_CA_FILE; "" for the system's trust store."""
    return str(getattr(args, "tls_ca_file", None) or os.environ.get(TLS_CA_ENV, ""))


def _has_credentials(args: argparse.Namespace) -> bool:
    given = getattr(args, "user", None) or getattr(args, "token", None)
    return bool(given or os.environ.get(TOKEN_ENV))


def _credentials(args: argparse.Namespace) -> tuple[str, str] | str | None:
    user = getattr(args, "user", None)
    token = getattr(args, "token", None)
    if user is not None and token is not None:
        raise CliError("give --user or --token, not both", Exit.USAGE)
    if user is not None:
        password = os.environ.get(PASSWORD_ENV)
        if password is None:
            if not sys.stdin.isatty():
                raise CliError(f"--user needs ${PASSWORD_ENV} (no terminal to ask)", Exit.USAGE)
            password = getpass.getpass(f"password for {user}: ")
        return (str(user), password)
    token = token or os.environ.get(TOKEN_ENV)
    return str(token) if token else None


def connect(args: argparse.Namespace, *, reconnect_for: float = 0.0) -> sc.Client:
    """A client per the global options. ``reconnect_for`` is how long lost connections
    are retried; 0 (one-shot commands) reports a refused connection at once."""
    target = parsed_endpoint(args)
    t = timeout(args)
    return sc.connect(
        str(target),
        connect_timeout=t,
        request_timeout=t,
        reconnect_timeout=reconnect_for,
        keepalive_interval=max(t, 1.0),
        controller=controller(args),
        credentials=credentials(args),
        tls_ca_file=tls_ca_file(args),
    )


def command(
    body: Callable[[argparse.Namespace], Awaitable[int]],
) -> Callable[[argparse.Namespace], int]:
    """The ``func`` of a subcommand whose body is ``async def body(args) -> int``."""

    def handler(args: argparse.Namespace) -> int:
        return run(args, lambda: body(args))

    return handler


def run(args: argparse.Namespace, body: Callable[[], Awaitable[int]]) -> int:
    """Run ``body`` on an event loop and turn what it raises into an exit code and one
    line on stderr (a traceback too with ``--debug``)."""
    debug = bool(getattr(args, "debug", False))
    if not debug:  # gRPC's C core logs a failed TLS handshake itself: one line is ours
        os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.CRITICAL + 1,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )

    async def main() -> int:
        return await body()

    try:
        return asyncio.run(main())
    except KeyboardInterrupt:
        return Exit.INTERRUPTED
    except BrokenPipeError:
        return stdout_closed()
    except Exception as e:
        code = exit_code(e)
        if debug:
            traceback.print_exc()
        message = one_line(e)
        if code == Exit.INTERNAL:
            message = f"internal error: {message} (run with --debug for the traceback)"
        elif code == Exit.AUTH and not _has_credentials(args):
            message += f" (authenticate with --user and ${PASSWORD_ENV}, or --token)"
        prog = getattr(args, "prog_", "segmentstore")
        print(f"{prog}: {printable(message)}", file=sys.stderr)
        return code


def write_all(out: IO[bytes], data: bytes) -> None:
    """Write all of ``data`` and flush. A pipe whose reader goes away mid-write takes part
    of it and reports success; the next write then raises BrokenPipeError (exit 141)."""
    view = memoryview(data)
    while view:
        n = out.write(view)
        view = view[n or 0 :]
    out.flush()


def stdout_closed() -> int:
    """stdout's reader went away: silence the interpreter's final flush, exit 141."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass
    return Exit.PIPE


def printable(text: str) -> str:
    """``text`` with every character that is not printable (controls, line breaks, bidi
    and other format marks, unassigned code points) written as ``\\uNNNN``."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def _escape(c: str) -> str:
    n = ord(c)
    return f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def status(args: argparse.Namespace, message: str) -> None:
    """A summary line for people on stderr (not with ``--quiet``)."""
    if not getattr(args, "quiet", False):
        print(printable(message), file=sys.stderr, flush=True)
