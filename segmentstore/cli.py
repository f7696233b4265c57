"""``segmentstore`` command line: ``segmentstore serve [options]`` and the subcommands of
the modules named in ``SUBCOMMANDS``.

A subcommand module (``segmentstore/commands/<name>.py``) has
``add_parser(subparsers) -> None``, which adds its parser(s) and sets
``func=handler`` with ``set_defaults``; ``handler(args) -> int`` returns the exit code.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from . import __version__
from .commands._cli import add_global_options, apply_top_level
from .config import FSYNC_MODES, ConfigError, ServerConfig, load_config

# One line per subcommand module; each module's add_parser registers its commands.
EXIT_STORAGE = 3  # serve: the store refused to open its data directory

SUBCOMMANDS: tuple[str, ...] = (
    "segmentstore.commands.segment",
    "segmentstore.commands.table",
    "segmentstore.commands.scope",
    "segmentstore.commands.stream",
    "segmentstore.commands.health",
    "segmentstore.commands.bench",
    "segmentstore.commands.completion",
    "segmentstore.commands.transfer",
    "segmentstore.commands.check",
    "segmentstore.commands.relay_schema",
    "segmentstore.commands.passwd",
)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="segmentstore", description="A Pravega-style segment store and its tools."
    )
    p.add_argument("--version", action="version", version=f"segmentstore {__version__}")
    add_global_options(p, top=True)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser(
        "serve",
        help="run the segment store server",
        description="Run the server. Every option can also be set as SEGMENTSTORE_<NAME> "
        "(e.g. SEGMENTSTORE_FSYNC=interval) or in a TOML file given with --config.",
    )
    s.add_argument("--config", type=Path, help="TOML file with settings (flags win over it)")
    s.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    s.add_argument("--port", type=int, help="TCP port (default 12345, Pravega's; 0 = any)")
    s.add_argument("--data-dir", type=Path, help="data directory (default ./segmentstore-data)")
    s.add_argument(
        "--fsync",
        choices=FSYNC_MODES,
        help="always: ack after fsync (default, safe); interval/never: faster, may lose "
        "acknowledged appends on power loss",
    )
    s.add_argument(
        "--fsync-interval-ms", type=int, help="fsync period for --fsync interval (default 100)"
    )
    s.add_argument("--http-host", help="address of the /metrics endpoint (default 127.0.0.1)")
    s.add_argument(
        "--http-port", type=int, help="Prometheus /metrics port (default 9091; -1 disables)"
    )
    s.add_argument(
        "--controller-port",
        type=int,
        help="Pravega gRPC controller port (default 9090, Pravega's; 0 = any; -1 disables)",
    )
    s.add_argument("--log-level", help="DEBUG, INFO, WARNING or ERROR (default INFO)")
    s.add_argument("--containers", type=int, help="segment containers (default 1)")
    s.add_argument(
        "--max-connections",
        type=int,
        help="connection cap (default 0: the open-file limit less a reserve for storage)",
    )
    s.add_argument("--tail-read-timeout-s", type=float, help="tail read wait (default 10)")
    s.add_argument(
        "--read-cache-mb",
        type=int,
        help="read cache size in MiB (default 0: 1/8 of the memory available, 64 MiB to 1 GiB)",
    )
    s.add_argument(
        "--log-file-mb",
        type=int,
        help="size of each write-ahead log file in MiB (default 64; 1 to 4096)",
    )
    s.add_argument(
        "--direct-io",
        choices=("on", "off"),
        help="write and read chunk files with O_DIRECT, bypassing the page cache (default on)",
    )
    # --- TLS and authorization (issue 20; README "Security") ---
    s.add_argument("--tls-cert-file", help="PEM certificate: TLS on every port (default off)")
    s.add_argument("--tls-key-file", help="PEM private key of --tls-cert-file")
    s.add_argument("--tls-client-ca-file", help="require client certificates from this CA")
    s.add_argument("--auth", choices=("on", "off"), help="require delegation tokens (default off)")
    s.add_argument("--auth-token-secret-file", help="file holding the token signing secret")
    s.add_argument("--auth-password-file", help="users and static tokens (segmentstore passwd)")
    s.add_argument("--auth-token-ttl-s", type=float, help="token lifetime (default 600)")
    s.add_argument(
        "--http-auth", choices=("on", "off"), help="HTTP port needs credentials (default off)"
    )
    s.add_argument(
        "--advertised-host", help="host name the controller gives clients (must match the cert)"
    )
    s.add_argument(
        "--advertised-port", type=int, help="port the controller gives clients (default --port)"
    )
    _name_settings_without_flags(s)
    for name in SUBCOMMANDS:
        importlib.import_module(name).add_parser(sub)
    return p


def _name_settings_without_flags(s: argparse.ArgumentParser) -> None:
    """``serve --help`` names every setting: those without a flag, with their defaults,
    in the epilog (budgets, timeouts, controller tuning: README "Resource budgets")."""
    flags = {option for action in s._actions for option in action.option_strings}
    rest = [
        f"{f.name}={f.default}"
        for f in dataclasses.fields(ServerConfig)
        if "--" + f.name.replace("_", "-") not in flags
    ]
    s.epilog = (
        "Settings without a flag (as SEGMENTSTORE_<NAME> or a TOML key), with their "
        "defaults: " + ", ".join(rest) + "."
    )


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse ``argv``. Event arguments after an option (``write S --routing-key k a b``)
    are left over by argparse once ``events`` matched nothing before the option: they
    are the events."""
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        if getattr(args, "events", None) == [] and not any(e.startswith("-") for e in extra):
            args.events = extra
        else:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    apply_top_level(parser, args)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    if args.command != "serve":
        code: int = args.func(args)
        return code
    flags = {k: v for k, v in vars(args).items() if k not in ("command", "config")}
    try:
        config = load_config(flags, toml_path=args.config)
    except ConfigError as e:
        print(f"segmentstore: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=config.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        from .server.server import StartupError, run
        from .storage import StorageError

        try:
            import uvloop
        except ImportError:
            logging.getLogger("segmentstore").warning("uvloop not installed; using asyncio's loop")
            asyncio.run(run(config))
        else:
            uvloop.run(run(config))
    except ModuleNotFoundError as e:
        # The SDK alone (`pip install .`) installs the command but not the server's
        # packages, some of which the server imports only as it starts.
        print(
            f"segmentstore: serve needs the server's packages: pip install "
            f"'segmentstore[server]' ({e})",
            file=sys.stderr,
        )
        return 2
    except StorageError as e:
        # A refusal to open the data directory (damage, wrong layout, in use): one line.
        print(f"segmentstore: cannot start: {e}", file=sys.stderr)
        return EXIT_STORAGE
    except StartupError as e:
        print(f"segmentstore: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
