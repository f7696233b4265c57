"""``segmentstore table ...``: create, read, change, list and delete key-value tables of a
running store, through the SDK.

Keys and values given on the command line are taken as the bytes the shell passed
(UTF-8 text, normally); output shows them with the same safe rendering as events
(``--json``: text, or ``key_b64`` / ``value_b64`` when not UTF-8).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from segmentstore_client import errors as E

from ._cli import (
    EXIST_OK,
    JSON_OBJECT,
    MISSING_OK,
    CliError,
    Exit,
    add_group,
    add_leaf,
    command,
    connect,
    exit_code,
    json_lines,
    non_negative_int,
    segment_name,
    status,
)
from ._render import aligned, put_bytes, text_line


def add_parser(subparsers: Any) -> None:
    sub = add_group(
        subparsers,
        "table",
        "create, read and change key-value tables",
        "Work with the key-value tables of a running segment store. Every "
        "update returns the key's new version; pass it back with --version to update "
        "only if nobody changed the key meanwhile.",
        (
            "segmentstore table create app/settings",
            "segmentstore table put app/settings color blue",
            "segmentstore table get app/settings color",
            "segmentstore table ls app/settings --json",
        ),
    )

    c = add_leaf(
        sub,
        "create",
        "create a table",
        "Create an empty table.",
        (
            "segmentstore table create app/settings",
            "segmentstore table create app/ids --key-length 16",
        ),
        func=table_command(_create),
        flags=(EXIST_OK,),
    )
    c.add_argument("table", type=segment_name)
    c.add_argument("--key-length", type=non_negative_int, default=0, help="fixed key size (0: any)")

    g = add_leaf(
        sub,
        "get",
        "print the value of keys",
        "Print the value of each KEY, one per line (exit code 9 if a key is missing).",
        (
            "segmentstore table get app/settings color",
            "segmentstore table get app/settings a b --json",
        ),
        func=table_command(_get),
    )
    g.add_argument("table", type=segment_name)
    g.add_argument("keys", nargs="+", metavar="KEY")
    g.add_argument(
        "--json", action="store_true", help="one JSON object (key, value, version) per key"
    )

    u = add_leaf(
        sub,
        "put",
        "set a key; prints its new version",
        "Set KEY to VALUE and print the key's new version. With --version the update "
        "happens only if the key still has that version; with --must-not-exist only if "
        "the key is absent (exit code 8 otherwise).",
        (
            "segmentstore table put app/settings color blue",
            "segmentstore table put app/settings color red --version 1234",
            "segmentstore table put app/settings lock me --must-not-exist",
        ),
    )
    u.add_argument("table", type=segment_name)
    u.add_argument("key")
    u.add_argument("value")
    cond = u.add_mutually_exclusive_group()
    cond.add_argument("--version", type=int, help="update only if the key has this version")
    cond.add_argument("--must-not-exist", action="store_true", help="insert only if absent")
    u.set_defaults(func=table_command(_put))

    r = add_leaf(
        sub,
        "rm",
        "remove keys",
        "Remove each KEY (absent keys are fine unless --version is given).",
        (
            "segmentstore table rm app/settings color",
            "segmentstore table rm app/settings lock --version 77",
        ),
        func=table_command(_rm),
    )
    r.add_argument("table", type=segment_name)
    r.add_argument("keys", nargs="+", metavar="KEY")
    r.add_argument("--version", type=int, help="remove only if the key has this version (one key)")

    ls = add_leaf(
        sub,
        "ls",
        "list keys, versions and values",
        "List the entries of a table (in hash order) as an aligned table or JSON lines.",
        (
            "segmentstore table ls app/settings",
            "segmentstore table ls app/settings --keys-only --json",
        ),
        func=table_command(_ls),
        flags=(json_lines("entry"),),
    )
    ls.add_argument("table", type=segment_name)
    ls.add_argument("--keys-only", action="store_true", help="keys and versions, no values")
    ls.add_argument("--limit", type=non_negative_int, help="stop after this many entries")

    i = add_leaf(
        sub,
        "info",
        "entry count and size of a table",
        "Show a table's entry count, key length and size.",
        ("segmentstore table info app/settings", "segmentstore table info app/settings --json"),
        func=table_command(_info),
        flags=(JSON_OBJECT,),
    )
    i.add_argument("table", type=segment_name)

    d = add_leaf(
        sub,
        "delete",
        "delete a table",
        "Delete a table and everything in it.",
        (
            "segmentstore table delete app/settings",
            "segmentstore table delete app/settings --must-be-empty",
        ),
        func=table_command(_delete),
        flags=(MISSING_OK,),
    )
    d.add_argument("table", type=segment_name)
    d.add_argument("--must-be-empty", action="store_true", help="refuse if keys remain (exit 8)")


def table_command(
    body: Callable[[argparse.Namespace], Awaitable[int]],
) -> Callable[[argparse.Namespace], int]:
    """:func:`command` whose "no such" / "already exists" errors name a table."""

    async def worded(args: argparse.Namespace) -> int:
        try:
            return await body(args)
        except (E.NoSuchSegment, E.SegmentAlreadyExists) as e:
            what = "does not exist" if isinstance(e, E.NoSuchSegment) else "already exists"
            raise CliError(f"table {args.table!r} {what}", exit_code(e)) from e

    return command(worded)


def _entry_json(key: bytes, value: bytes | None, version: int) -> str:
    d: dict[str, Any] = {}
    put_bytes(d, "key", key)
    if value is not None:
        put_bytes(d, "value", value)
    d["version"] = version
    return json.dumps(d, separators=(",", ":"))


async def _create(args: argparse.Namespace) -> int:
    async with connect(args) as client:
        created = await client.create_table(
            args.table, key_length=args.key_length, exist_ok=args.exist_ok
        )
    status(args, f"created table {args.table}" if created else f"table {args.table} exists already")
    return Exit.OK


async def _get(args: argparse.Namespace) -> int:
    keys = [os.fsencode(k) for k in args.keys]
    async with connect(args) as client:
        entries = await client.table(args.table).get_many(keys)
    missing = [k for k, e in zip(keys, entries, strict=True) if e is None]
    out = []
    for e in entries:
        if e is not None:
            out.append(_entry_json(e.key, e.value, e.version) if args.json else text_line(e.value))
    if out:
        print("\n".join(out))
    if missing:
        names = ", ".join(repr(text_line(k)) for k in missing)
        raise CliError(f"table {args.table!r} has no key {names}", Exit.NO_KEY)
    return Exit.OK


async def _put(args: argparse.Namespace) -> int:
    async with connect(args) as client:
        version = await client.table(args.table).put(
            os.fsencode(args.key),
            os.fsencode(args.value),
            version=args.version,
            must_not_exist=args.must_not_exist,
        )
    print(version)
    return Exit.OK


async def _rm(args: argparse.Namespace) -> int:
    if args.version is not None and len(args.keys) != 1:
        raise CliError("--version needs exactly one key", Exit.USAGE)
    keys = [(os.fsencode(k), args.version) for k in args.keys]
    async with connect(args) as client:
        await client.table(args.table).remove_many(keys)
    status(args, f"removed {len(keys)} key(s) from {args.table}")
    return Exit.OK


async def _ls(args: argparse.Namespace) -> int:
    rows: list[tuple[str, int, str]] = []
    out = sys.stdout
    async with connect(args) as client:
        table = client.table(args.table)
        await table.info()  # a missing table is "no such table", not an empty listing
        entries = table.keys() if args.keys_only else table.items()
        async for e in entries:
            if args.limit is not None and len(rows) >= args.limit:
                break
            value = getattr(e, "value", None)
            if args.json:
                out.write(_entry_json(e.key, value, e.version) + "\n")
                rows.append(("", 0, ""))
            else:
                rows.append(
                    (text_line(e.key), e.version, "" if value is None else text_line(value))
                )
    if not args.json:
        headers = ("KEY", "VERSION") if args.keys_only else ("KEY", "VERSION", "VALUE")
        print(aligned(headers, [r[: len(headers)] for r in rows]))
    return Exit.OK


async def _info(args: argparse.Namespace) -> int:
    async with connect(args) as client:
        info = await client.table_info(args.table)
    row = {
        "table": info.name,
        "entries": info.entry_count,
        "key_length": info.key_length,
        "length": info.length,
        "start_offset": info.start_offset,
    }
    if args.json:
        print(json.dumps(row, separators=(",", ":")))
    else:
        print(aligned([k.upper().replace("_", " ") for k in row], [list(row.values())]))
    return Exit.OK


async def _delete(args: argparse.Namespace) -> int:
    async with connect(args) as client:
        deleted = await client.delete_table(
            args.table, must_be_empty=args.must_be_empty, missing_ok=args.missing_ok
        )
    status(args, f"deleted table {args.table}" if deleted else f"table {args.table} did not exist")
    return Exit.OK
