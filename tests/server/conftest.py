"""Fixtures for the server tests: a connected raw-protocol client on the module's server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import pytest

from .wire import WireClient

if TYPE_CHECKING:
    from conftest import ServerProcess  # tests/conftest.py


@pytest.fixture
async def client(module_server: ServerProcess) -> AsyncIterator[WireClient]:
    c = await WireClient.connect(module_server.host, module_server.port)
    yield c
    await c.close()


@pytest.fixture
async def client2(module_server: ServerProcess) -> AsyncIterator[WireClient]:
    c = await WireClient.connect(module_server.host, module_server.port)
    yield c
    await c.close()
