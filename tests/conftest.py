"""Shared fixtures: a real segmentstore server process on 127.0.0.1, ephemeral ports
(started by the one launcher, ``segmentstore.server.launcher``, which the benchmarks use
too; the caller's ``SEGMENTSTORE_*`` settings are not passed to the server)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import pytest

from segmentstore.server import launcher
from segmentstore.server.launcher import ServerProcess

# Servers started by the tests write 4 MiB log files instead of 64 MiB ones: the suite starts
# hundreds of them, and zero-filling 64 MiB each cost tens of GB of disk writes per run. Log
# rolling is exercised more often this way, not less.
launcher.DEFAULT_ENV.setdefault("SEGMENTSTORE_LOG_FILE_MB", "4")


class ServerFactory(Protocol):
    """The type of the ``server_factory`` fixture."""

    def __call__(
        self,
        data_dir: Path | None = None,
        extra_args: list[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> ServerProcess: ...


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[ServerFactory]:
    """Make servers with ``server_factory(data_dir, extra_args)``; all killed at teardown."""
    made: list[ServerProcess] = []

    class Factory(ServerProcess):
        def __init__(
            self,
            data_dir: Path | None = None,
            extra_args: list[str] | None = None,
            env: dict[str, str] | None = None,
        ) -> None:
            super().__init__(
                data_dir or tmp_path / f"data{len(made)}", list(extra_args or []), dict(env or {})
            )
            made.append(self)

    yield Factory
    for s in made:
        s.kill()


@pytest.fixture
def server(server_factory: ServerFactory) -> ServerProcess:
    """A started server with a fresh data dir (fsync=always, the default)."""
    s = server_factory()
    s.start()
    return s


@pytest.fixture(scope="module")
def module_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server shared by the tests of a module (they must use their own segment names)."""
    s = ServerProcess(tmp_path_factory.mktemp("module-server"))
    s.start()
    yield s
    s.kill()


__all__ = ["ServerFactory", "ServerProcess"]
