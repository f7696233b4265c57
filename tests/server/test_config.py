"""Settings from flags, SEGMENTSTORE_* environment variables and a TOML file, in that order of
precedence; a bad value stops the server with exit code 2 and a one-line reason."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from segmentstore.config import ServerConfig, load_config
from segmentstore.server import launcher

from .wire import WireClient

if TYPE_CHECKING:
    from conftest import ServerFactory, ServerProcess  # tests/conftest.py

FSYNC = re.compile(r"fsync=(\w+)")


def ready_fsync(server: ServerProcess) -> str:
    line = next(ln for ln in server.log if "segmentstore ready" in ln)
    m = FSYNC.search(line)
    assert m, line
    return m.group(1)


def write_toml(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("toml", "env", "flag", "want"),
    [
        (None, {"SEGMENTSTORE_FSYNC": "never"}, None, "never"),
        ('fsync = "interval"\n', {}, None, "interval"),
        ('[segmentstore]\nfsync = "never"\n', {}, None, "never"),
        ('fsync = "interval"\n', {"SEGMENTSTORE_FSYNC": "never"}, None, "never"),
        ('fsync = "interval"\n', {"SEGMENTSTORE_FSYNC": "never"}, "always", "always"),
        (None, {"SEGMENTSTORE_FSYNC": "interval"}, "never", "never"),
        (None, {}, None, "always"),  # the safe default
    ],
)
async def test_fsync_precedence(
    server_factory: ServerFactory,
    tmp_path: Path,
    toml: str | None,
    env: dict[str, str],
    flag: str | None,
    want: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    args: list[str] = []
    if toml is not None:
        args += ["--config", str(write_toml(tmp_path / "ss.toml", toml))]
    if flag is not None:
        args += ["--fsync", flag]
    for name in [k for k in os.environ if k.startswith("SEGMENTSTORE_")]:
        monkeypatch.delenv(name)  # the precedence under test is only the case's own
    server = server_factory(extra_args=args, env=env)
    server.start()
    assert ready_fsync(server) == want
    async with await WireClient.connect(server.host, server.port) as c:
        await c.keepalive()


async def test_config_file_named_by_environment(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    toml = write_toml(tmp_path / "env.toml", 'fsync = "never"\ntail_read_timeout_s = 0.5\n')
    server = server_factory(env={"SEGMENTSTORE_CONFIG": str(toml)})
    server.start()
    assert ready_fsync(server) == "never"


def run_serve(
    tmp_path: Path, args: list[str], env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SEGMENTSTORE_")}
    cmd = [sys.executable, "-m", "segmentstore", "serve", "--port", "0", "--http-port", "0"]
    cmd += ["--controller-port", "-1"]
    cmd += ["--data-dir", str(tmp_path / "data"), *args]
    return subprocess.run(cmd, env={**base, **env}, capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize(
    ("args", "env", "toml", "message"),
    [
        (
            [],
            {"SEGMENTSTORE_FSYNC": "sometimes"},
            None,
            "fsync must be one of always, interval, never",
        ),
        ([], {}, 'fsync = "bogus"\n', "fsync must be one of"),
        ([], {}, "no_such_setting = 1\n", "unknown setting"),
        ([], {}, "fsync = \n", "cannot read config file"),
        (
            [],
            {"SEGMENTSTORE_PORT": "abc"},
            None,
            "SEGMENTSTORE_PORT: port = 'abc' is not a valid int",
        ),
        (["--fsync", "bogus"], {}, None, "invalid choice"),
        (["--tail-read-timeout-s", "0"], {}, None, "tail read timeout must be positive"),
        (["--read-cache-mb", "-1"], {}, None, "read cache size must be 0 (automatic)"),
        (["--config", "/nonexistent/ss.toml"], {}, None, "cannot read config file"),
        (["--log-file-mb", "0"], {}, None, "log file size must be 1 to 4096 MiB, not 0"),
        ([], {"SEGMENTSTORE_LOG_FILE_MB": "5000"}, None, "log file size must be 1 to 4096"),
        (["--advertised-port", "70000"], {}, None, "advertised port 70000 out of range"),
        # A setting outside the [segmentstore] table would be ignored: refused instead.
        (
            [],
            {},
            'fsync = "never"\n[segmentstore]\nport = 0\n',
            "'fsync' is outside the [segmentstore] table",
        ),
        ([], {}, "segmentstore = 1\n", "'segmentstore' must be a table"),
    ],
)
def test_bad_settings_exit_2_with_a_clear_message(
    tmp_path: Path, args: list[str], env: dict[str, str], toml: str | None, message: str
) -> None:
    if toml is not None:
        args = [*args, "--config", str(write_toml(tmp_path / "bad.toml", toml))]
    proc = run_serve(tmp_path, args, env)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "ready" not in proc.stderr


@pytest.mark.parametrize(
    ("args", "env", "want"),
    [
        ([], {}, "direct I/O (O_DIRECT)"),  # the default
        (["--direct-io", "off"], {}, "buffered I/O"),
        ([], {"SEGMENTSTORE_DIRECT_IO": "off"}, "buffered I/O"),
    ],
)
async def test_direct_io_setting_and_data_read_back_after_restart(
    server_factory: ServerFactory,
    tmp_path: Path,
    args: list[str],
    env: dict[str, str],
    want: str,
) -> None:
    # Events big and small, so chunk files get blocks written whole, partly and padded; after
    # a restart the read cache is empty and every byte comes back from the chunk files.
    from .test_restart import check_after_restart, populate
    from .wire import unique

    name = unique()
    writers = [uuid.uuid4() for _ in range(2)]
    server = server_factory(extra_args=args, env=env)
    server.start()
    line = next(ln for ln in server.log if "chunk files in" in ln)
    if want.startswith("direct") and "not supported" in line:
        pytest.skip("the test directory's filesystem does not support O_DIRECT")
    assert line.rstrip().endswith(want), line
    async with await WireClient.connect(server.host, server.port) as c:
        await c.create_segment(name)
        await populate(c, writers, name, 400)
        before = await c.read_all(name)
    assert server.stop() == 0
    server.start()
    async with await WireClient.connect(server.host, server.port) as c:
        assert await c.read_all(name) == before
        await check_after_restart(c, writers, name, 400)


def test_direct_io_rejects_other_values(tmp_path: Path) -> None:
    proc = run_serve(tmp_path, [], {"SEGMENTSTORE_DIRECT_IO": "maybe"})
    assert proc.returncode == 2
    assert "direct_io must be on or off" in proc.stderr


def test_other_tools_keys_beside_the_segmentstore_table_are_left_alone(tmp_path: Path) -> None:
    """A file shared with other tools: their keys and tables stay theirs; ours are read."""
    toml = 'title = "shared"\n[other_tool]\nfsync = 1\n[segmentstore]\nfsync = "never"\n'
    cfg = load_config(toml_path=write_toml(tmp_path / "shared.toml", toml), environ={})
    assert cfg.fsync == "never"


@pytest.mark.parametrize(("args", "env"), [(["--log-file-mb", "2"], {}), ([], {})])
def test_log_file_size_setting_sizes_the_log_files(
    server_factory: ServerFactory, args: list[str], env: dict[str, str]
) -> None:
    # The second case takes the suite's default (tests/conftest.py: 4 MiB); the product's own
    # default, 64 MiB, is the ServerConfig field's.
    server = server_factory(extra_args=args, env=env)
    server.start()
    want = (2 if args else int(launcher.DEFAULT_ENV["SEGMENTSTORE_LOG_FILE_MB"])) << 20
    log_dir = server.data_dir / "container-0000" / "log"
    deadline = time.monotonic() + 20
    sizes: list[int] = []
    while time.monotonic() < deadline:
        sizes = [p.stat().st_size for p in log_dir.glob("*") if p.is_file()]
        if sizes and max(sizes) >= want:
            break
        time.sleep(0.05)
    assert sizes and max(sizes) == want, sizes
    assert ServerConfig().log_file_mb == 64
