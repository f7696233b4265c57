"""Server settings from flags, ``SEGMENTSTORE_*`` environment variables and a TOML file.

Precedence: command-line flag > environment variable > TOML file > default. Every
setting has a safe default; ``--fsync always`` (ack after fsync) is the default and the
faster modes must be asked for by name.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENV_PREFIX = "SEGMENTSTORE_"
FSYNC_MODES = ("always", "interval", "never")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
ON_OFF = ("direct_io", "auth", "http_auth")  # "on" or "off"; TOML true and false too


class ConfigError(ValueError):
    """A setting has a value the server cannot use."""


@dataclass(frozen=True, slots=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 12345
    data_dir: Path = Path("segmentstore-data")
    fsync: str = "always"
    fsync_interval_ms: int = 100
    http_host: str = "127.0.0.1"
    http_port: int = 9091  # 0 = any free port is not useful for scraping; -1 disables
    http_max_connections: int = 1024  # HTTP (/metrics, relay) connections open at once
    http_idle_timeout_s: float = 30.0  # an HTTP connection with no request in flight closes
    log_level: str = "INFO"
    containers: int = 1
    max_connections: int = 0  # 0: derived from the fd limit (RLIMIT_NOFILE - reserve)
    connection_inflight_bytes: int = 32 * 1024 * 1024
    connection_write_buffer_bytes: int = 8 * 1024 * 1024
    tail_read_timeout_s: float = 10.0
    read_cache_mb: int = 0  # 0: 1/8 of the memory the process may use, 64 MiB to 1 GiB
    direct_io: str = "on"  # chunk files with O_DIRECT where the filesystem allows it
    log_file_mb: int = 64  # size of each write-ahead log file (zero-filled ahead of use)
    # --- resource budgets and timeouts (issue 13; README "Resource budgets") ---
    store_input_bytes: int = 128 * 1024 * 1024  # partial frames buffered, all connections
    store_output_bytes: int = 128 * 1024 * 1024  # replies queued, all connections
    store_inflight_bytes: int = 256 * 1024 * 1024  # appends not yet durable, all connections
    max_pending_requests: int = 256  # requests being served at once, per connection
    max_writers_per_connection: int = 4096  # append sessions (writer ids) per connection
    store_writers: int = 65536  # append sessions (writer ids), all connections
    disk_read_concurrency: int = 32  # reads from chunk files at once, all connections
    hello_timeout_s: float = 10.0  # a connection must send Hello within this
    frame_timeout_s: float = 30.0  # a frame must complete within this of its first byte
    write_stall_timeout_s: float = 60.0  # queued replies must start draining within this
    fd_reserve: int = 0  # fds kept for storage and metrics; 0 = max(64, 1/8 of the limit)
    # The Pravega gRPC controller (segmentstore/controller): port 9090 as Pravega's, -1 = off.
    controller_port: int = 9090
    controller_tick_s: float = 1.0  # lease expiry, retention and auto-scale checks
    controller_rate_window_s: float = 120.0  # decaying average of segment rates
    controller_scale_cooldown_s: float = 60.0  # minimum segment age before auto-scaling it
    controller_retention_interval_s: float = 60.0  # how often retention takes a stream cut
    controller_max_open_txns: int = 10_000  # open transactions per stream; more: refused
    # --- TLS and authorization (issue 20; README "Security"); off unless set ---
    tls_cert_file: str = ""  # PEM certificate chain: TLS on the wire, controller and HTTP ports
    tls_key_file: str = ""  # its PEM private key
    tls_client_ca_file: str = ""  # set: clients must present a certificate from this CA
    auth: str = "off"  # "on": every request needs a valid delegation token (JWT, HS512)
    auth_token_secret_file: str = ""  # the shared HS512 secret (controller and segment store)
    auth_password_file: str = ""  # users (segmentstore passwd) and static service tokens
    auth_token_ttl_s: float = 600.0  # lifetime of the tokens the controller issues
    http_auth: str = "off"  # "on": /metrics, the relay and status need Basic/Bearer credentials
    advertised_host: str = ""  # host name getURI hands out (TLS clients check it); "" = --host
    advertised_port: int = 0  # port getURI hands out (Pravega's published port); 0 = --port

    def validate(self) -> ServerConfig:
        if self.fsync not in FSYNC_MODES:
            raise ConfigError(f"fsync must be one of {', '.join(FSYNC_MODES)}, not {self.fsync!r}")
        if self.fsync_interval_ms < 1:  # 0 or less: the log thread would fsync in a busy loop
            raise ConfigError(f"fsync_interval_ms must be at least 1, not {self.fsync_interval_ms}")
        if self.log_level.upper() not in LOG_LEVELS:
            raise ConfigError(
                f"log_level must be one of {', '.join(LOG_LEVELS)}, not {self.log_level!r}"
            )
        for name in ("host", "http_host"):  # "" would listen on every interface
            if not getattr(self, name).strip():
                raise ConfigError(f"{name} is empty (0.0.0.0 listens on every interface)")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port {self.port} out of range")
        if not 0 <= self.advertised_port <= 65535:
            raise ConfigError(f"advertised port {self.advertised_port} out of range")
        if not -1 <= self.http_port <= 65535:
            raise ConfigError(f"http port {self.http_port} out of range")
        if self.containers < 1:
            raise ConfigError("containers must be at least 1")
        if self.read_cache_mb < 0:
            raise ConfigError("read cache size must be 0 (automatic) or more MiB")
        if not 1 <= self.log_file_mb <= 4096:
            raise ConfigError(f"log file size must be 1 to 4096 MiB, not {self.log_file_mb}")
        if self.direct_io not in ("on", "off"):
            raise ConfigError(f"direct_io must be on or off, not {self.direct_io!r}")
        if not -1 <= self.controller_port <= 65535:
            raise ConfigError(f"controller port {self.controller_port} out of range")
        if min(self.controller_tick_s, self.controller_rate_window_s) <= 0:
            raise ConfigError("controller tick and rate window must be positive")
        if self.controller_max_open_txns < 1:
            raise ConfigError("controller_max_open_txns must be at least 1")
        if self.tail_read_timeout_s <= 0:
            raise ConfigError("tail read timeout must be positive")
        for name in ("hello_timeout_s", "frame_timeout_s", "write_stall_timeout_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive")
        for name in (
            "store_input_bytes",
            "store_output_bytes",
            "store_inflight_bytes",
            "max_pending_requests",
            "max_writers_per_connection",
            "store_writers",
            "disk_read_concurrency",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1")
        _validate_security(self)
        if self.max_connections < 0 or self.fd_reserve < 0:
            raise ConfigError("max_connections and fd_reserve must be 0 (automatic) or more")
        if self.http_max_connections < 1 or self.http_idle_timeout_s <= 0:
            raise ConfigError("http max connections and idle timeout must be positive")
        return self


def _validate_security(c: ServerConfig) -> None:
    if bool(c.tls_cert_file) != bool(c.tls_key_file):
        raise ConfigError("TLS needs both tls_cert_file and tls_key_file")
    if c.tls_client_ca_file and not c.tls_cert_file:
        raise ConfigError("tls_client_ca_file needs tls_cert_file and tls_key_file")
    if c.auth not in ("on", "off"):
        raise ConfigError(f"auth must be on or off, not {c.auth!r}")
    if c.auth == "on" and not c.auth_token_secret_file:
        raise ConfigError("auth = on needs auth_token_secret_file (the token signing secret)")
    if c.http_auth not in ("on", "off"):
        raise ConfigError(f"http_auth must be on or off, not {c.http_auth!r}")
    if c.http_auth == "on" and not c.auth_password_file:
        raise ConfigError("http_auth = on needs auth_password_file (the users it accepts)")
    if c.auth_token_ttl_s <= 0:
        raise ConfigError("auth_token_ttl_s must be positive")


def _convert(field: dataclasses.Field[Any], raw: Any, source: str) -> Any:
    kind = field.type if isinstance(field.type, str) else field.type.__name__
    try:
        if kind == "int":
            return int(raw)
        if kind == "float":
            return float(raw)
        if kind == "Path":
            if not str(raw).strip():  # Path("") is ".": the data would land in the cwd
                raise ValueError("empty")
            return Path(str(raw)).expanduser()
        if field.name in ON_OFF and isinstance(raw, bool):  # TOML `direct_io = false`
            return "on" if raw else "off"
        return str(raw)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{source}: {field.name} = {raw!r} is not a valid {kind}") from e


def load_config(
    flags: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    toml_path: Path | None = None,
) -> ServerConfig:
    """Merge the sources; ``flags`` holds only the flags given on the command line."""
    environ = os.environ if environ is None else environ
    fields = {f.name: f for f in dataclasses.fields(ServerConfig)}
    values: dict[str, Any] = {}
    path = toml_path or (
        Path(environ[ENV_PREFIX + "CONFIG"]) if ENV_PREFIX + "CONFIG" in environ else None
    )
    if path is not None:
        try:
            with open(path, "rb") as f:
                table = tomllib.load(f)
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise ConfigError(f"cannot read config file {path}: {e}") from e
        if "segmentstore" in table:
            outer, table = table, table["segmentstore"]
            if not isinstance(table, dict):
                raise ConfigError(f"{path}: 'segmentstore' must be a table ([segmentstore])")
            # Other tools' keys may share the file; a setting of ours outside the table
            # would be silently ignored, so it is refused.
            stray = sorted(k for k in outer if k.replace("-", "_") in fields)
            if stray:
                raise ConfigError(
                    f"{path}: {stray[0]!r} is outside the [segmentstore] table, which holds "
                    "this server's settings; move it into the table"
                )
        for key, raw in table.items():
            name = key.replace("-", "_")
            if name not in fields:
                near = difflib.get_close_matches(name, fields, n=1)
                hint = f" (did you mean {near[0]!r}?)" if near else ""
                raise ConfigError(f"{path}: unknown setting {key!r}{hint}")
            values[name] = _convert(fields[name], raw, str(path))
    for name, field in fields.items():
        env_name = ENV_PREFIX + name.upper()
        if env_name in environ:
            values[name] = _convert(field, environ[env_name], env_name)
    for name, raw in (flags or {}).items():
        if raw is not None and name in fields:
            values[name] = _convert(fields[name], raw, f"--{name.replace('_', '-')}")
    return ServerConfig(**values).validate()
