"""Fixtures for the stream SDK tests: ``segmentstore serve`` with its controller on
ephemeral ports, and an async client that knows both."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import pytest
import segmentstore_client as sc
from controller.conftest import Ctl, controller_uri  # tests/controller/conftest.py

if TYPE_CHECKING:
    from conftest import ServerFactory  # tests/conftest.py


@pytest.fixture
def ctl(server_factory: ServerFactory) -> Ctl:
    s = server_factory(extra_args=["--controller-port", "0"])
    s.start()
    return Ctl(s)


@pytest.fixture
async def client(ctl: Ctl) -> AsyncIterator[sc.Client]:
    async with sc.connect(ctl.server.endpoint, controller=controller_uri(ctl.server)) as c:
        yield c


def connect(ctl: Ctl, **kw: Any) -> sc.Client:
    return sc.connect(ctl.server.endpoint, controller=controller_uri(ctl.server), **kw)
