"""Fixtures for the stream SDK tests: ``segmentstore serve`` with its controller on
ephemeral ports, and an async client that knows both."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import segmentstore_client as sc
from controller.conftest import Ctl, controller_uri  # tests/controller/conftest.py

from segmentstore.server.launcher import ServerProcess

if TYPE_CHECKING:
    from conftest import ServerFactory  # tests/conftest.py


@pytest.fixture
def ctl(server_factory: ServerFactory) -> Ctl:
    s = server_factory(extra_args=["--controller-port", "0"])
    s.start()
    return Ctl(s)


@pytest.fixture(scope="module")
def mctl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ctl]:
    """One server with its controller for a module (its tests use their own scopes)."""
    s = ServerProcess(Path(tmp_path_factory.mktemp("mctl")), ["--controller-port", "0"])
    s.start()
    yield Ctl(s)
    s.kill()


@pytest.fixture
async def mclient(mctl: Ctl) -> AsyncIterator[sc.Client]:
    async with sc.connect(mctl.server.endpoint, controller=controller_uri(mctl.server)) as c:
        yield c


@pytest.fixture
async def client(ctl: Ctl) -> AsyncIterator[sc.Client]:
    async with sc.connect(ctl.server.endpoint, controller=controller_uri(ctl.server)) as c:
        yield c


def connect(ctl: Ctl, **kw: Any) -> sc.Client:
    return sc.connect(ctl.server.endpoint, controller=controller_uri(ctl.server), **kw)
