"""The relay's statistics endpoints of the Databus spec: ``/containerStats/...`` and
``/relayStats/outbound/http/...``.

Contract. Outbound = what the relay served over HTTP; inbound = what was appended to the
sources' segments. Clients: an outbound client is a consumer as ``/stats`` names it (the
``client`` parameter, else its IP address); an inbound client is a writer id that
appended to a source's segments with event numbers (a segment attribute the store keeps
durably; its value is the writer's last event number there). Physical sources are named
``<source name>:<segment number>`` (``/physicalBuffers``). Event-buffer answers use the
spec's field names (``minScn``, ``maxScn``, ``prevScn``, ``numDataEvents``,
``sizeDataEvents``, ``timestampMinScnEvent`` ...); the relay's buffer is the segment
itself, so ``freeSpace`` is the free space of the disk under the data directory. Times
are milliseconds; "reset" is the relay's start. Unknown clients, sources or physical
sources answer 404 as the other endpoints do. A middleware counts the protocol's calls
(``/stream``, ``/sources``, ``/register``, ``/bootstrap``, ``/startSCN``, ``/targetSCN``)
per client and per source for ``/relayStats``.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import asdict
from typing import Any

from aiohttp import web

from ..storage import StorageError
from ..storage.api import CORE_ATTRIBUTE_MSB
from .catalogue import RELAY_SOURCE_ID, Source
from .checkpoint import CheckpointError, parse_checkpoint
from .partition import Partition
from .routes import HTTP, SERVICE, SOURCE_IDS, BadRequest, client_name
from .service import RelayService
from .stats import ClientStats, HttpCalls, SourceOut

_KINDS = {
    "/stream": "stream",
    "/sources": "sources",
    "/register": "register",
    "/bootstrap": "bootstrap",
    "/startSCN": "bootstrap",
    "/targetSCN": "bootstrap",
}


@web.middleware
async def count_calls(request: web.Request, handler: Any) -> web.StreamResponse:
    kind = _KINDS.get(request.path)
    if kind is None:
        response: web.StreamResponse = await handler(request)
        return response
    started = time.perf_counter()
    stats = request.app[SERVICE].stats
    try:
        response = await handler(request)
    except BadRequest as e:
        ms = (time.perf_counter() - started) * 1000
        stats.record_call(client_name(request), kind, e.status, ms, request.get(SOURCE_IDS, []))
        raise
    ms = (time.perf_counter() - started) * 1000
    too_old = response.headers.get("X-Databus-Error") == "checkpoint-too-old"
    window = -1
    if response.headers.get("X-Databus-Checkpoint") and kind == "stream":
        try:
            window = parse_checkpoint(response.headers["X-Databus-Checkpoint"]).window_scn
        except CheckpointError:
            window = -1
    sources = request.get(SOURCE_IDS, [])
    stats.record_call(client_name(request), kind, response.status, ms, sources, too_old, window)
    return response


def _since(ms: int) -> int:
    return int(time.time() * 1000) - ms


def _free_space(service: RelayService) -> int:
    data_dir = getattr(getattr(service.store, "config", None), "data_dir", None)
    if data_dir is None:
        return -1
    try:
        return shutil.disk_usage(data_dir).free
    except OSError:
        return -1


def _writers(service: RelayService, segments: tuple[str, ...]) -> dict[str, dict[str, int]]:
    """Writer id -> {segment: last event number}, over ``segments``."""
    out: dict[str, dict[str, int]] = {}
    for seg in segments:
        try:
            attrs = service.store.info(seg).attributes
        except StorageError:
            continue
        for key, value in attrs.items():
            if key == RELAY_SOURCE_ID or key.int >> 64 == CORE_ATTRIBUTE_MSB:
                continue
            out.setdefault(str(key), {})[seg] = value
    return out


def _buffer(
    service: RelayService, dimension: str, parts: list[Partition], peers: int
) -> dict[str, Any]:
    started = service.stats.started_ms
    now = int(time.time() * 1000)
    kept = [p for p in parts if p.scns]
    min_scn = min((p.min_scn for p in kept), default=-1)
    max_scn = max((p.max_scn for p in kept), default=-1)
    first = min((p.first_ts_ms for p in parts if p.first_ts_ms), default=0)
    latest = max((p.latest_ts_ms for p in parts), default=0)
    prev = [p.prev_scn for p in parts if p.prev_scn is not None]
    return {
        "dimension": dimension,
        "freeSpace": _free_space(service),
        "minScn": min_scn,
        "prevScn": max(prev, default=-1),
        "maxScn": max_scn,
        "minSeenWinScn": min_scn,
        "maxSeenWinScn": max_scn,
        "numDataEvents": sum(p.events for p in parts),
        "sizeDataEvents": sum(p.scan_offset - max(p.base, 0) for p in parts),
        "numInvalidEvents": sum(1 for p in parts if p.broken),
        "numPeers": peers,
        "timestampMinScnEvent": first,
        "timestampMaxScnEvent": latest,
        "timeSpan": latest - first if first else 0,
        "timeSinceLastEvent": now - latest if latest else -1,
        "timestampLastResetMs": started,
        "timeSinceLastResetMs": now - started,
        "enabled": True,
    }


def _outbound(dimension: str, out: ClientStats | SourceOut, started: int) -> dict[str, Any]:
    return {
        "dimension": dimension,
        "numDataEvents": out.events,
        "sizeDataEvents": out.bytes,
        "numDataEventsFiltered": out.filtered,
        "timestampLastResetMs": started,
        "timeSinceLastResetMs": _since(started),
        "enabled": True,
    }


async def _source(service: RelayService, token: str) -> Source:
    source = await service.catalogue.find(token)
    if source is None:
        raise BadRequest(f"unknown source {token!r}", status=404)
    return source


async def _psources(service: RelayService) -> dict[str, tuple[Source, int]]:
    out = {}
    for s in await service.catalogue.sources():
        for i in range(len(s.partitions)):
            out[f"{s.name}:{s.numbers[i] if s.numbers else 0}"] = (s, i)
    return out


async def container_stats(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    stats = service.stats
    direction = request.match_info["direction"]
    if direction not in ("inbound", "outbound"):
        raise BadRequest(f"no statistics {direction!r}: inbound or outbound", status=404)
    inbound = direction == "inbound"
    what = request.match_info["what"].strip("/").split("/")
    if what == ["clients"]:
        if inbound:
            sources = await service.catalogue.sources()
            segs = tuple(seg for s in sources for seg in s.partitions)
            return web.json_response(sorted(_writers(service, segs)))
        return web.json_response(sorted(stats.clients))
    if what == ["total"]:
        if inbound:
            m = service.ctx.metrics
            return web.json_response(
                {
                    "dimension": "inbound.total",
                    "numOpenConns": m.connections,
                    "numConnsTotal": m.connections_total,
                    "numAppends": m.appends,
                    "numBytes": m.append_bytes,
                    "numEvents": m.events,
                    "timeSinceLastResetMs": _since(stats.started_ms),
                }
            )
        return web.json_response(
            {
                "dimension": "outbound.total",
                "numOpenConns": request.app[HTTP].open_connections,
                "numClients": len(stats.clients),
                "numConnectedClients": len(stats.connected()),
                **asdict(stats.total),
                "timeSinceLastResetMs": _since(stats.started_ms),
            }
        )
    if len(what) == 2 and what[0] == "client":
        return web.json_response(await _client_stats(service, what[1], inbound))
    if what[0] == "events" and len(what) in (2, 3):
        return web.json_response(await _event_stats(service, what[1:], inbound))
    raise BadRequest(f"no statistics at {request.path!r}", status=404)


async def _client_stats(service: RelayService, name: str, inbound: bool) -> dict[str, Any]:
    if inbound:
        sources = await service.catalogue.sources()
        segs = tuple(seg for s in sources for seg in s.partitions)
        writers = _writers(service, segs)
        if name not in writers:
            raise BadRequest(f"no inbound client {name!r}", status=404)
        return {"dimension": name, "lastEventNumbers": writers[name]}
    client = service.stats.clients.get(name)
    if client is None:
        raise BadRequest(f"no outbound client {name!r}", status=404)
    return {"dimension": name, **asdict(client)}


async def _event_stats(service: RelayService, what: list[str], inbound: bool) -> Any:
    stats = service.stats
    started = stats.started_ms
    sources = await service.catalogue.sources()
    kind = what[0]
    if len(what) == 1:
        if kind == "sources":
            return [str(s.id) for s in sources]
        if kind == "psources":
            return sorted(await _psources(service))
        if kind == "total":
            if inbound:
                parts = [p for s in sources for p in await service.refreshed(s)]
                writers = _writers(service, tuple(seg for s in sources for seg in s.partitions))
                return _buffer(service, "inbound.total", parts, len(writers))
            return _outbound("outbound.total", stats.total, started)
    elif kind == "source":
        source = await _source(service, what[1])
        if inbound:
            parts = await service.refreshed(source)
            peers = len(_writers(service, source.partitions))
            return _buffer(service, source.name, parts, peers)
        return _outbound(source.name, stats.sources.get(source.id, SourceOut()), started)
    elif kind == "psource":
        found = (await _psources(service)).get(what[1])
        if found is None:
            raise BadRequest(f"unknown physical source {what[1]!r}", status=404)
        source, i = found
        part = (await service.refreshed(source))[i]
        if inbound:
            peers = len(_writers(service, (source.partitions[i],)))
            return _buffer(service, what[1], [part], peers)
        return _outbound(what[1], stats.sources.get(source.id, SourceOut()), started)
    elif kind == "client":
        if inbound:
            return await _client_stats(service, what[1], True)
        client = stats.clients.get(what[1])
        if client is None:
            raise BadRequest(f"no outbound client {what[1]!r}", status=404)
        return _outbound(what[1], client, started)
    raise BadRequest(f"no event statistics {'/'.join(what)!r}", status=404)


async def relay_stats(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    stats = service.stats
    what = request.match_info["what"].strip("/").split("/")
    if what == ["sources"]:
        return web.json_response(sorted(str(s) for s in stats.sources))
    if what == ["clients"]:
        return web.json_response(sorted(stats.calls))
    if what == ["total"]:
        body = asdict(stats.total_calls)
        body.update(dimension="total", numPeers=len(stats.connected()))
        return web.json_response(body)
    if len(what) == 2 and what[0] == "client":
        calls = stats.calls.get(what[1])
        if calls is None:
            raise BadRequest(f"no outbound client {what[1]!r}", status=404)
        return web.json_response({"dimension": what[1], **asdict(calls)})
    if len(what) == 2 and what[0] == "source":
        source = await _source(service, what[1])
        out: HttpCalls = stats.sources.get(source.id, SourceOut()).calls
        return web.json_response({"dimension": source.name, **asdict(out)})
    raise BadRequest(f"no statistics at {request.path!r}", status=404)


def add_stats_routes(app: web.Application) -> None:
    app.middlewares.append(count_calls)
    r = app.router
    r.add_get("/containerStats/{direction}/{what:.+}", container_stats)
    r.add_get("/relayStats/outbound/http/{what:.+}", relay_stats)
