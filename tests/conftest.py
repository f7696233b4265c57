"""Shared fixtures: a real segmentstore server process on 127.0.0.1, ephemeral ports
(started by the one launcher, ``segmentstore.server.launcher``, which the benchmarks use
too; the caller's ``SEGMENTSTORE_*`` settings are not passed to the server)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest

from segmentstore.server import launcher
from segmentstore.server.launcher import ServerProcess

# Servers started by the tests write 4 MiB log files instead of 64 MiB ones: the suite starts
# hundreds of them, and zero-filling 64 MiB each cost tens of GB of disk writes per run. Log
# rolling is exercised more often this way, not less.
launcher.DEFAULT_ENV.setdefault("SEGMENTSTORE_LOG_FILE_MB", "4")

TESTS = Path(__file__).resolve().parent


def _scope(nodeid: str) -> str:
    """The unit of work of a test under pytest-xdist: its file, or "tests/spark" for every
    Spark test (one worker starts the one Spark session)."""
    path = nodeid.split("::", 1)[0]
    return "tests/spark" if path.startswith("tests/spark/") else path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``scripts/test`` runs the suite on two pytest-xdist workers: a file's tests stay on one
    worker (its module fixtures are made once), all Spark tests on one."""
    from xdist.scheduler import LoadScopeScheduling

    class ByFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid)

    return ByFile(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The Spark tests first: they are the longest unit of work, and the other worker takes
    the rest meanwhile (xdist hands out units in collection order)."""
    items.sort(key=lambda item: _scope(item.nodeid) != "tests/spark")


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
