"""The relay's HTTP endpoints (Databus 2.0 relay protocol) as aiohttp handlers.

Contract: parameters are parsed and checked here, the work is done by ``RelayService``.
A bad parameter answers 400 with ``X-Databus-Error: InvalidRequestParamValueException``,
``X-Databus-Error-Cause: <what is wrong>`` and a JSON body saying the same; an unknown
source answers 404 the same way (``UnknownSourceException``). The spec's two stream
conditions answer 200 with ``X-Databus-Error: no-events`` / ``checkpoint-too-old``.
Every ``/stream`` and ``/bootstrap`` answer carries the next checkpoint in
``X-Databus-Checkpoint``; bodies are compressed when the request accepts gzip/deflate.
Our additions: ``timeout`` (ms, at most 60000) bounds the long poll of ``/stream``,
``client`` names the consumer in ``/stats``.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from segmentstore_client.formats import databus

from ..storage import StorageError
from .catalogue import SCHEMA_TABLE, Source
from .checkpoint import Checkpoint, CheckpointError, parse_checkpoint
from .filters import FilterError, KeyTest, parse_filters
from .http_server import HttpServer
from .service import RelayService, StreamAnswer

DEFAULT_SIZE = 1024 * 1024
MAX_SIZE = 64 * 1024 * 1024
MAX_HOLD_MS = 60_000
MIN_COMPRESS = 1024  # smaller bodies go out as they are: gzip would not save a packet

SOURCE_IDS = "relay.source_ids"  # request key: the ids of the sources a /stream names
SERVICE: web.AppKey[RelayService] = web.AppKey("relay", RelayService)
HTTP: web.AppKey[HttpServer] = web.AppKey("http", HttpServer)


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400, kind: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind or (
            "InvalidRequestParamValueException" if status == 400 else "UnknownSourceException"
        )


def _error(e: BadRequest) -> web.Response:
    cause = str(e).replace("\r", " ").replace("\n", " ")
    return web.json_response(
        {"error": e.kind, "message": str(e)},
        status=e.status,
        headers={"X-Databus-Error": e.kind, "X-Databus-Error-Cause": cause[:500]},
    )


@web.middleware
async def errors_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        response: web.StreamResponse = await handler(request)
        return response
    except BadRequest as e:
        return _error(e)


def _int(request: web.Request, name: str, default: int, lo: int, hi: int) -> int:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"{name}={raw!r} is not an integer") from None
    if not lo <= value <= hi:
        raise BadRequest(f"{name}={value} is out of range {lo}..{hi}")
    return value


def _bool(request: web.Request, name: str) -> bool:
    raw = request.query.get(name, "false").strip().lower()
    if raw not in ("true", "false", ""):
        raise BadRequest(f"{name}={raw!r} must be true or false")
    return raw == "true"


def _output(request: web.Request) -> bool:
    """True for JSON output."""
    raw = request.query.get("output", "binary").strip().lower()
    if raw not in ("json", "binary"):
        raise BadRequest(f"output={raw!r} must be json or binary")
    return raw == "json"


MAX_SOURCES = 1000


async def _sources(service: RelayService, raw: str | None, required: bool = True) -> list[Source]:
    listed = await service.catalogue.sources()
    if raw is None or not raw.strip().strip('"'):
        if required:
            raise BadRequest("sources is required (comma-separated source ids or names)")
        return listed
    tokens = [t.strip() for t in raw.strip().strip('"').split(",") if t.strip()]
    if len(tokens) > MAX_SOURCES:
        raise BadRequest(f"at most {MAX_SOURCES} sources per request")
    out: list[Source] = []
    for token in tokens:
        source = next(
            (s for s in listed if token in (str(s.id), s.name) or token in s.partitions), None
        )
        if source is None:
            raise BadRequest(f"unknown source {token!r}", status=404)
        if source not in out:
            out.append(source)
    return sorted(out, key=lambda s: s.id)


def _checkpoint(request: web.Request) -> Checkpoint:
    try:
        return parse_checkpoint(request.query.get("checkPoint"))
    except CheckpointError as e:
        raise BadRequest(str(e)) from None


def client_name(request: web.Request) -> str:
    name = request.query.get("client") or request.remote or "unknown"
    return name[:100]


async def _answer(
    request: web.Request, service: RelayService, answer: StreamAnswer, as_json: bool
) -> web.Response:
    headers = {"X-Databus-Checkpoint": answer.checkpoint.to_json()}
    if answer.too_old is not None:
        headers["X-Databus-Error"] = "checkpoint-too-old"
        headers["X-Databus-Error-Cause"] = answer.too_old
    elif answer.no_events:
        headers["X-Databus-Error"] = "no-events"
    response = web.Response(
        body=b"".join(answer.chunks),
        headers=headers,
        content_type="application/json" if as_json else "application/binary",
    )
    if answer.nbytes >= MIN_COMPRESS:
        response.enable_compression()
    service.stats.record(client_name(request), answer.events, answer.nbytes, answer.filtered)
    service.stats.record_sources(answer.by_source)
    return response


async def stream(request: web.Request) -> web.StreamResponse:
    service = request.app[SERVICE]
    sources = await _sources(service, request.query.get("sources"))
    request[SOURCE_IDS] = [s.id for s in sources]
    for source in sources:
        if service.state_of(source) == "shutdown":
            raise BadRequest(f"source {source.name!r} is shut down", status=404)
    checkpoint = _checkpoint(request)
    size = _int(request, "size", DEFAULT_SIZE, 1, MAX_SIZE)
    as_json = _output(request)
    try:
        tests = parse_filters(request.query.get("filters"))
    except FilterError as e:
        raise BadRequest(str(e)) from None
    from_latest = _bool(request, "streamFromLatestScn")
    hold_ms = _int(request, "timeout", int(service.default_hold * 1000), 0, MAX_HOLD_MS)
    stats = service.stats.client(client_name(request))
    stats.in_flight += 1
    try:
        answer = await service.stream(
            sources, checkpoint, size, tests, as_json, hold_ms / 1000, from_latest
        )
    finally:
        stats.in_flight -= 1
    return await _answer(request, service, answer, as_json)


async def bootstrap(request: web.Request) -> web.StreamResponse:
    """Snapshot from the source's compacted table (``bootstrap.py``): the latest event of
    every key up to the start position ``/startSCN`` gave, in key order, chunked by
    ``snapshot_offset``; catch-up from the log, from that position (the checkpoint's
    ``partitions``, or ``bootstrap_start_scn`` for a one-partition source) up to
    ``bootstrap_target_scn`` (a stream source: up to each segment's tail now).
    ``PhaseCompleted: TRUE`` once the phase is done."""
    service = request.app[SERVICE]
    checkpoint = _checkpoint(request)
    snapshot = checkpoint.mode == "BOOTSTRAP_SNAPSHOT"
    if checkpoint.mode not in ("BOOTSTRAP_SNAPSHOT", "BOOTSTRAP_CATCHUP"):
        raise BadRequest("consumption_mode must be BOOTSTRAP_SNAPSHOT or BOOTSTRAP_CATCHUP")
    field = "bootstrap_start_scn" if snapshot else "bootstrap_target_scn"
    try:
        bound = int(checkpoint.extra[field])
    except (KeyError, TypeError, ValueError):
        raise BadRequest(f"the checkpoint needs {field} (an integer)") from None
    named = checkpoint.extra.get("snapshot_source" if snapshot else "catchup_source")
    raw = (str(named) if named else None) or request.query.get("sources")
    sources = await _sources(service, raw)
    size = _int(request, "batchSize", DEFAULT_SIZE, 1, MAX_SIZE)
    as_json = _output(request)
    tests = _bootstrap_filters(request.query.get("filter") or request.query.get("filters"), sources)
    if snapshot:
        answer = await _snapshot(service, sources[0], checkpoint, bound, size, tests, as_json)
    else:
        _catchup_sane(checkpoint, bound, sources)
        upper: dict[str, int] = {}
        for s in sources:
            parts = await service.refreshed(s)
            for i, part in enumerate(parts):
                upper[s.key(i)] = part.max_scn if s.stream else bound
        answer = await service.stream(sources, checkpoint, size, tests, as_json, 0.0, upper=upper)
    response = await _answer(request, service, answer, as_json)
    response.headers["PhaseCompleted"] = "TRUE" if answer.done else "FALSE"
    return response


def _catchup_sane(checkpoint: Checkpoint, target: int, sources: list[Source]) -> None:
    """The spec's two catch-up errors, for sources with one SCN sequence (a stream's
    segments each have their own, so there is no one SCN to compare): a snapshot ahead of
    its target (the sanity check: 400), and a client already past the target, whose
    ``sinceScn`` the bootstrap cannot reach (``BootstrapTooOldException``, 503: a newer
    ``/targetSCN`` helps)."""
    if any(s.stream for s in sources):
        return
    start, since = (
        _extra_int(checkpoint, f) for f in ("bootstrap_start_scn", "bootstrap_since_scn")
    )
    if start is not None and start > target:
        raise BadRequest(
            f"bootstrap_start_scn {start} is above bootstrap_target_scn {target}: a snapshot "
            "cannot be ahead of its catch-up target"
        )
    if since is not None and target < since and (start is None or start <= target):
        raise BadRequest(
            f"bootstrap_since_scn {since} is above bootstrap_target_scn {target}: ask "
            "/targetSCN again",
            status=503,
            kind="BootstrapTooOldException",
        )


def _extra_int(checkpoint: Checkpoint, name: str) -> int | None:
    value = checkpoint.extra.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"the checkpoint's {name} must be an integer")
    return value


def _bootstrap_filters(text: str | None, sources: list[Source]) -> dict[int, KeyTest]:
    """The spec's /bootstrap filter is one source's (no source id around it); the
    per-source form of /stream is accepted too."""
    try:
        return parse_filters(text)
    except FilterError as e:
        if not text or len(sources) != 1:
            raise BadRequest(str(e)) from None
        try:
            return parse_filters(f'{{"{sources[0].id}":{text}}}')
        except FilterError:
            raise BadRequest(str(e)) from None


async def _snapshot(
    service: RelayService,
    source: Source,
    checkpoint: Checkpoint,
    start_scn: int,
    size: int,
    tests: dict[int, KeyTest],
    as_json: bool,
) -> StreamAnswer:
    keys = [source.key(i) for i in range(len(source.partitions))]
    start = {k: checkpoint.partitions[k] for k in keys if k in checkpoint.partitions}
    if not start:
        if source.stream:
            raise BadRequest(
                "a stream source's snapshot needs the checkpoint /startSCN answered with "
                "(its partitions)"
            )
        start = {source.key(0): (start_scn, -1)}
    raw_token = str(checkpoint.extra.get("snapshot_offset") or "")
    try:
        token = bytes.fromhex(raw_token)
    except ValueError:
        raise BadRequest(f"snapshot_offset {raw_token[:40]!r} is not this relay's") from None
    snap = await service.bootstrap.snapshot(
        source, start, token, size, tests.get(source.id), as_json
    )
    for key, pos in start.items():
        checkpoint.partitions[key] = pos
        checkpoint.ends.pop(key, None)
    checkpoint.window_scn, checkpoint.window_offset = start_scn, -1
    checkpoint.extra.update(snapshot_offset=snap.token.hex(), snapshot_source=source.name)
    answer = StreamAnswer(checkpoint, snap.chunks, snap.nbytes, snap.events, snap.filtered)
    answer.by_source[source.id] = [snap.events, snap.nbytes, snap.filtered]
    if snap.chunks:
        marker = (
            databus.json_line(databus.end_of_period(start_scn))
            if as_json
            else databus.encode_end_of_period(start_scn)
        )
        answer.chunks.append(marker)
        answer.nbytes += len(marker)
    answer.done = snap.done
    return answer


async def start_scn(request: web.Request) -> web.Response:
    """Brings the sources' bootstrap tables up to date and answers the SCN their snapshot
    is consistent at (one source: its SCN; several: by source id); the header
    ``X-Databus-Checkpoint`` carries the snapshot checkpoint to send to ``/bootstrap``,
    with every partition's start position."""
    service = request.app[SERVICE]
    sources = await _sources(service, request.query.get("sources"))
    since = _checkpoint(request)
    values: dict[str, int] = {}
    positions: dict[str, tuple[int, int]] = {}
    for source in sources:
        try:
            applied = await service.bootstrap.apply(source)
        except StorageError as e:  # e.g. the disk is full: the table cannot be written
            raise BadRequest(
                f"the bootstrap table of {source.name!r} cannot be brought up to date: {e}",
                status=503,
                kind="BootstrapUnavailableException",
            ) from None
        positions.update(applied)
        values[str(source.id)] = max((p[0] for p in applied.values()), default=-1)
    scn = max(values.values(), default=-1)
    cp = Checkpoint(
        scn,
        -1,
        "BOOTSTRAP_SNAPSHOT",
        positions,
        {
            "bootstrap_start_scn": scn,
            "bootstrap_since_scn": since.window_scn,
            "snapshot_source": sources[0].name,
            "snapshot_offset": "",
        },
    )
    body: object = str(scn) if len(values) == 1 else values
    return web.json_response(body, headers={"X-Databus-Checkpoint": cp.to_json()})


async def target_scn(request: web.Request) -> web.Response:
    """The SCN catch-up has to reach: the source's newest window now."""
    service = request.app[SERVICE]
    param = "source" if "source" in request.query else "sources"
    sources = await _sources(service, request.query.get(param))
    values: dict[str, int] = {}
    for source in sources:
        parts = await service.refreshed(source)
        values[str(source.id)] = max((p.max_scn for p in parts), default=-1)
    if len(values) == 1:
        return web.json_response(str(next(iter(values.values()))))
    return web.json_response(values)


async def sources_list(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    version = _int(request, "v", 1, 1, 2)
    listed = await service.catalogue.sources()
    if version == 1:
        return web.json_response([{"name": s.name, "id": s.id} for s in listed])
    return web.json_response(
        {
            "sources": [
                {"id": s.id, "name": s.name, "partitions": list(s.partitions)} for s in listed
            ]
        }
    )


async def register(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    sources = await _sources(service, request.query.get("sources"), required=False)
    by_name = {s.name: s for s in sources}
    out: list[dict[str, Any]] = []
    token = b""
    tables = service.ctx.tables
    while True:
        try:
            page, token = await tables.read_entries(SCHEMA_TABLE, 1000, token)
        except StorageError:
            break  # no schema was ever set
        if not page:
            break
        for key, value, _version in page:
            name, _, ver = key.decode("utf-8", "replace").rpartition("\x00")
            if name in by_name and ver.isdigit():
                out.append({"id": by_name[name].id, "version": int(ver), "schema": value.decode()})
    if "sources" in request.query and not out:
        raise BadRequest("no schema registered for these sources", status=404)
    out.sort(key=lambda o: (o["id"], o["version"]))
    return web.json_response(out)


async def physical_sources(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    out = []
    for s in await service.catalogue.sources():
        for seg in s.partitions:
            out.append({"name": seg, "id": s.id, "sources": [{"id": s.id, "name": s.name}]})
    return web.json_response(out)


async def physical_buffers(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    out: dict[str, list[str]] = {}
    for s in await service.catalogue.sources():
        for i, seg in enumerate(s.partitions):
            out[f"{s.name}:{s.numbers[i] if s.numbers else 0}"] = [seg]
    return web.json_response(out)


async def buffer_info(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    source = await service.catalogue.find(request.match_info["source"])
    if source is None:
        raise BadRequest(f"unknown source {request.match_info['source']!r}", status=404)
    parts = await service.refreshed(source)
    index = request.match_info.get("partition", "0")
    if not index.isdigit() or int(index) >= len(parts):
        raise BadRequest(f"source {source.name!r} has no partition {index!r}", status=404)
    p = parts[int(index)]
    return web.json_response(
        {
            "minScn": p.min_scn,
            "maxScn": p.max_scn,
            "timestampLatestEvent": p.latest_ts_ms,
            "timestampFirstEvent": p.first_ts_ms,
        }
    )


async def stats_page(request: web.Request) -> web.Response:
    return web.json_response(await stats_snapshot(request.app[SERVICE]))


async def stats_snapshot(service: RelayService) -> dict[str, Any]:
    m = service.ctx.metrics
    sources: dict[str, Any] = {}
    for s in await service.catalogue.sources():
        parts = await service.refreshed(s)
        sources[str(s.id)] = {
            "name": s.name,
            "partitions": list(s.partitions),
            "state": service.state_of(s),
            "events": sum(p.events for p in parts),
            "bytes": sum(p.scan_offset for p in parts),
            "minScn": min((p.min_scn for p in parts), default=-1),
            "maxScn": max((p.max_scn for p in parts), default=-1),
            "timestampFirstEvent": min((p.first_ts_ms for p in parts), default=0),
            "timestampLatestEvent": max((p.latest_ts_ms for p in parts), default=0),
            "error": next((p.broken for p in parts if p.broken), None),
        }
    rate_in, rate_out, bytes_out = service.stats.rates(m.events)
    outbound = service.stats.outbound()
    outbound.update(events_per_s=round(rate_out, 1), bytes_per_s=round(bytes_out, 1))
    return {
        "inbound": {
            "appends": m.appends,
            "bytes": m.append_bytes,
            "events": m.events,
            "events_per_s": round(rate_in, 1),
            "sources": sources,
        },
        "outbound": outbound,
    }


async def disconnect_clients(request: web.Request) -> web.Response:
    http = request.app[HTTP]
    closed = http.disconnect_all(keep=request.protocol)
    return web.json_response({"disconnected": closed})


async def control_sources(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    action = request.match_info["action"]
    if action not in ("start", "pause", "unpause", "shutdown", "status"):
        raise BadRequest(f"unknown control action {action!r}", status=404)
    sources = await _sources(service, request.query.get("sources"), required=False)
    new = {"start": "running", "unpause": "running", "pause": "paused", "shutdown": "shutdown"}
    out = []
    for source in sources:
        if action != "status":
            service.set_state(source, new[action])
        parts = await service.refreshed(source)
        scn = max((p.max_scn for p in parts), default=-1)
        out.append({"name": source.name, "status": service.state_of(source), "SCN": scn})
    return web.json_response(out[0] if len(out) == 1 else out)


def add_routes(app: web.Application, service: RelayService) -> None:
    app[SERVICE] = service
    app.middlewares.append(errors_middleware)
    r = app.router
    r.add_get("/sources", sources_list)
    r.add_get("/register", register)
    r.add_get("/stream", stream)
    r.add_get("/bootstrap", bootstrap)
    r.add_get("/startSCN", start_scn)
    r.add_get("/targetSCN", target_scn)
    r.add_get("/physicalSources", physical_sources)
    r.add_get("/physicalBuffers", physical_buffers)
    r.add_get("/bufferInfo/inbound/{source}", buffer_info)
    r.add_get("/bufferInfo/inbound/{source}/{partition}", buffer_info)
    r.add_get("/stats", stats_page)
    r.add_get("/relayCommand/disconnectClients", disconnect_clients)
    r.add_get("/controlSources/{action}", control_sources)
