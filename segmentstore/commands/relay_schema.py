"""``segmentstore relay-schema``: register a schema of a relay source (served by /register).

Contract: reads the schema text from a file (``-`` = stdin), stores it as version
``--version`` of the source through the SDK (``segmentstore_client.relay.set_schema``).
Exit codes: 0 stored, 2 bad arguments or unreadable file, 3 the server could not be
reached, and the other codes of ``_cli.Exit``; one line on stderr, no traceback.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ._cli import CliError, Exit, add_global_options, command, connect, examples


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "relay-schema",
        help="register a schema version of a Databus relay source",
        description="Store SCHEMA_FILE as a schema version of SOURCE (its relay name, "
        "e.g. scope.stream.0); GET /register?sources=<id> serves it.",
        epilog=examples(
            "segmentstore relay-schema orders.eu.0 order.avsc --endpoint tcp://127.0.0.1:12345",
            "cat order-v2.avsc | segmentstore relay-schema orders.eu.0 - --version 2",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("source", help="relay source name (scope.stream.0)")
    p.add_argument("schema_file", help="file with the schema text, or - for stdin")
    p.add_argument("--version", type=int, default=1, dest="schema_version", help="default 1")
    add_global_options(p)
    p.set_defaults(func=command(_handler), prog_="segmentstore relay-schema")


async def _handler(args: argparse.Namespace) -> int:
    if args.schema_version < 1:
        raise CliError("--version must be 1 or more", Exit.USAGE)
    try:
        if args.schema_file == "-":
            schema = sys.stdin.read()
        else:
            with open(args.schema_file, encoding="utf-8") as f:
                schema = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise CliError(f"cannot read {args.schema_file}: {e}", Exit.USAGE) from None
    from segmentstore_client.relay import set_schema

    async with connect(args) as client:
        await set_schema(client, args.source, schema, args.schema_version)
    print(f"schema version {args.schema_version} of {args.source} stored")
    return Exit.OK
