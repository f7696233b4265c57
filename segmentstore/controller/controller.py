"""The controller inside ``segmentstore serve``: metadata, gRPC server, background duties.

Contract: ``await Controller.start(store, tables, settings, endpoint)`` loads the metadata
table, finishes operations a crash interrupted (streams first, then transactions), binds
the gRPC port on the running event loop and starts one background task that finishes what
a failed storage step left pending (disk full, I/O error), expires transaction leases,
enforces retention and auto-scales by-rate streams. ``stop()`` stops
accepting RPCs (calls in flight get a short grace) and the task. ``stats()`` feeds the
server's Prometheus endpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Any

import grpc
from segmentstore_client.controller_proto import controller_pb2_grpc as pb_grpc

from ..auth.controller_auth import AuthInterceptor
from ..storage import SegmentStore, StorageUnavailable
from ..tables import TableStore
from .autoscale import AutoScaler
from .decode_guard import DecodeGuard
from .errors import ControllerError
from .groups import Groups
from .metadata import Metadata
from .retention import Retention
from .service import Service
from .streams import Streams
from .transactions import Transactions

log = logging.getLogger("segmentstore.controller")


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    host: str = "127.0.0.1"
    port: int = 9090
    tick_s: float = 1.0  # how often leases, retention and rates are looked at
    rate_window_s: float = 120.0  # time constant of the decaying segment rates
    scale_cooldown_s: float = 60.0  # no split or merge of a segment younger than this
    retention_interval_s: float = 60.0  # how often a retention stream cut is taken
    max_open_txns: int = 10_000  # open transactions per stream (createTransaction refuses more)


class Controller:
    def __init__(
        self, md: Metadata, streams: Streams, txns: Transactions, settings: ControllerSettings
    ) -> None:
        self.md = md
        self.streams = streams
        self.txns = txns
        self.settings = settings
        self.retention = Retention(streams, settings.retention_interval_s)
        self.autoscaler = AutoScaler(streams, settings.rate_window_s, settings.scale_cooldown_s)
        self.service: Service | None = None
        self.port = 0
        self._server: grpc.aio.Server | None = None
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def start(
        cls,
        store: SegmentStore,
        tables: TableStore,
        settings: ControllerSettings,
        endpoint: tuple[str, int],
        tls_credentials: Any = None,  # grpc server credentials: TLS on this port (auth/)
        auth: Any = None,  # auth.controller_auth.ControllerAuth: every RPC authenticates
    ) -> Controller:
        md = await Metadata.open(tables)
        streams = Streams(store, md)
        txns = Transactions(streams, md)
        txns.max_open_per_stream = settings.max_open_txns
        await streams.recover()
        await txns.recover()
        ctl = cls(md, streams, txns, settings)
        interceptors = [DecodeGuard(), *([] if auth is None else [AuthInterceptor(auth)])]
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)], interceptors=interceptors)
        host = f"[{settings.host}]" if ":" in settings.host else settings.host  # IPv6
        address = f"{host}:{settings.port}"
        try:
            if tls_credentials is not None:
                port = server.add_secure_port(address, tls_credentials)
            else:
                port = server.add_insecure_port(address)
        except RuntimeError as e:
            raise ControllerError(f"cannot listen on {address} for the controller: {e}") from e
        if port == 0:
            raise ControllerError(f"cannot listen on {address} for the controller (in use?)")
        ctl.port = port
        ctl.service = Service(streams, txns, endpoint, (settings.host, port))
        ctl.service.groups = Groups(streams, tables)
        ctl.service.auth = auth
        pb_grpc.add_ControllerServiceServicer_to_server(ctl.service, server)  # type: ignore[no-untyped-call]
        await server.start()
        ctl._server = server
        ctl._task = asyncio.get_running_loop().create_task(ctl._background())
        return ctl

    async def _background(self) -> None:
        tick = self.settings.tick_s
        while True:  # until stop() cancels it
            await asyncio.sleep(tick)
            duties = (
                self.streams.finish_pending,
                self.txns.finish_pending,
                self.txns.expire,
                self.retention.run,
                self.autoscaler.run,
            )
            for duty in duties:
                try:
                    await duty()
                except asyncio.CancelledError:
                    raise
                except StorageUnavailable as e:  # disk full: one line; the next tick retries
                    log.warning("controller background duty %s: %s", duty.__qualname__, e)
                except Exception:
                    log.exception("controller background duty %s failed", duty.__qualname__)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._server is not None:
            await self._server.stop(grace=2.0)

    def stats(self) -> dict[str, object]:
        per_stream = {
            rec.key: len(rec.current.segments)
            for rec in self.md.streams.values()
            if rec.state == "active"
        }
        return {
            "rpcs": dict(self.service.rpc_counts) if self.service else {},
            "rpc_seconds": dict(self.service.rpc_seconds) if self.service else {},
            "streams": len(self.md.streams),
            "scopes": len(self.md.scopes),
            "segments_per_stream": per_stream,
            "scale_events": self.streams.scale_events,
            "open_transactions": self.txns.open_count(),
            "committed_transactions": self.txns.committed,
            "aborted_transactions": self.txns.aborted,
            "retention_truncations": self.retention.truncations,
        }
