"""``segmentstore scope ...``: create, list, check and delete the scopes of a running store,
through the SDK's stream admin (the controller at ``--controller``).

Contract: each command is one controller call (``exists`` lists the scopes); a missing
scope exits 4, an existing one 5, an unreachable controller 3, as for segments.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ._cli import (
    EXIST_OK,
    MISSING_OK,
    CliError,
    Exit,
    add_group,
    add_leaf,
    json_lines,
    printable,
    status,
)
from ._stream_io import stream_command, stream_connect


def scope_name(text: str) -> str:
    """argparse type: a scope name (no '/', not empty)."""
    if not text or "/" in text:
        raise argparse.ArgumentTypeError(f"a scope name has no '/' and is not empty: {text!r}")
    return text


def add_parser(subparsers: Any) -> None:
    sub = add_group(
        subparsers,
        "scope",
        "create, list and delete scopes (stream namespaces)",
        "Work with the scopes of a running segment store, through its controller. A "
        "scope holds streams (see `segmentstore stream`).",
        (
            "segmentstore scope create shop",
            "segmentstore scope list",
            "segmentstore scope exists shop && echo yes",
            "segmentstore scope delete shop",
        ),
    )

    c = add_leaf(
        sub,
        "create",
        "create a scope",
        "Create a scope (exit code 5 if it exists, unless --exist-ok).",
        ("segmentstore scope create shop", "segmentstore scope create shop --exist-ok"),
        func=stream_command(_create),
        flags=(EXIST_OK,),
    )
    c.add_argument("scope", type=scope_name)

    add_leaf(
        sub,
        "list",
        "names of the scopes",
        "List every scope, one name per line (or JSON lines).",
        ("segmentstore scope list", "segmentstore scope list --json"),
        func=stream_command(_list),
        flags=(json_lines("scope"),),
    )

    e = add_leaf(
        sub,
        "exists",
        "exit 0 if a scope exists, 4 if not",
        "Exit 0 if the scope exists and 4 (with one line on stderr) if it does not.",
        ("segmentstore scope exists shop && echo yes",),
        func=stream_command(_exists),
    )
    e.add_argument("scope", type=scope_name)

    d = add_leaf(
        sub,
        "delete",
        "delete an empty scope",
        "Delete a scope; it must hold no streams (delete them first).",
        ("segmentstore scope delete shop", "segmentstore scope delete shop --missing-ok"),
        func=stream_command(_delete),
        flags=(MISSING_OK,),
    )
    d.add_argument("scope", type=scope_name)


def _missing(scope: str) -> CliError:
    return CliError(f"scope {scope!r} does not exist", Exit.NOT_FOUND)


async def _create(args: argparse.Namespace) -> int:
    async with stream_connect(args) as client:
        created = await client.create_scope(args.scope, exist_ok=args.exist_ok)
    status(args, f"created scope {args.scope}" if created else f"scope {args.scope} exists already")
    return Exit.OK


async def _list(args: argparse.Namespace) -> int:
    async with stream_connect(args) as client:
        scopes = await client.list_scopes()
    for scope in scopes:
        print(json.dumps({"scope": scope}) if args.json else printable(scope))
    return Exit.OK


async def _exists(args: argparse.Namespace) -> int:
    async with stream_connect(args) as client:
        scopes = await client.list_scopes()
    if args.scope not in scopes:
        raise _missing(args.scope)
    return Exit.OK


async def _delete(args: argparse.Namespace) -> int:
    async with stream_connect(args) as client:
        deleted = await client.delete_scope(args.scope, missing_ok=args.missing_ok)
    status(args, f"deleted scope {args.scope}" if deleted else f"scope {args.scope} did not exist")
    return Exit.OK
