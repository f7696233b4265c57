"""Traffic counters of the relay: outbound per client, and the inbound side sampled from
the server's metrics, with rates over the last sample window.

Contract: a client is named by the ``client`` query parameter when a consumer sends one
(the SDK's consumer does), else by its IP address. A client counts as connected while it
has a request in flight or made one in the last ``CONNECTED_SECONDS``. Rates are computed
from two samples at least a second apart, so scraping often does not make them noisy.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

CONNECTED_SECONDS = 30.0


@dataclass(slots=True)
class ClientStats:
    requests: int = 0
    events: int = 0
    bytes: int = 0
    filtered: int = 0
    no_events: int = 0
    errors: int = 0
    in_flight: int = 0
    last_seen: float = 0.0


@dataclass(slots=True)
class HttpCalls:
    """Databus's outbound HTTP statistics (``/relayStats/outbound/http/...``)."""

    numStreamCalls: int = 0  # the spec's field names, camelCase
    numSourcesCalls: int = 0
    numRegisterCalls: int = 0
    numBootstrapCalls: int = 0
    numOtherCalls: int = 0
    numErrStream: int = 0
    numErrSources: int = 0
    numErrRegister: int = 0
    numScnNotFoundStream: int = 0
    timeStreamCallsMs: float = 0.0
    latestStreamCallTime: int = 0
    maxStreamWinScn: int = -1
    minStreamWinScn: int = -1


@dataclass(slots=True)
class SourceOut:
    """What the relay sent of one source."""

    events: int = 0
    bytes: int = 0
    filtered: int = 0
    calls: HttpCalls = field(default_factory=HttpCalls)


class RelayStats:
    def __init__(self) -> None:
        self.started_ms = int(time.time() * 1000)
        self.clients: dict[str, ClientStats] = {}
        self.total = ClientStats()
        self.calls: dict[str, HttpCalls] = {}  # per client
        self.total_calls = HttpCalls()
        self.sources: dict[int, SourceOut] = {}
        self._sample: tuple[float, int, int, int] | None = None
        self._rates = (0.0, 0.0, 0.0)

    def client(self, name: str) -> ClientStats:
        stats = self.clients.get(name)
        if stats is None:
            if len(self.clients) >= 10_000:  # bounded: forget the longest-idle client
                oldest = min(self.clients, key=lambda k: self.clients[k].last_seen)
                del self.clients[oldest]
            stats = self.clients[name] = ClientStats()
        stats.last_seen = time.time()
        return stats

    def record(self, name: str, events: int, nbytes: int, filtered: int) -> None:
        for s in (self.client(name), self.total):
            s.requests += 1
            s.events += events
            s.bytes += nbytes
            s.filtered += filtered
            if events == 0 and nbytes == 0:
                s.no_events += 1

    def record_sources(self, per_source: dict[int, list[int]]) -> None:
        """Per source id: [events, bytes, filtered] of one answer."""
        for src, (events, nbytes, filtered) in per_source.items():
            out = self.sources.setdefault(src, SourceOut())
            out.events += events
            out.bytes += nbytes
            out.filtered += filtered

    def record_call(
        self,
        client: str,
        kind: str,
        status: int,
        ms: float,
        sources: list[int],
        too_old: bool = False,
        window_scn: int = -1,
    ) -> None:
        """One HTTP call of ``kind`` (stream, sources, register, bootstrap, other)."""
        if client not in self.calls and len(self.calls) >= 10_000:
            del self.calls[next(iter(self.calls))]  # bounded: forget the oldest client
        targets = [self.calls.setdefault(client, HttpCalls()), self.total_calls]
        targets += [self.sources.setdefault(s, SourceOut()).calls for s in sources]
        error = status >= 400
        for c in targets:
            if kind == "stream":
                c.numStreamCalls += 1
                c.numErrStream += error
                c.numScnNotFoundStream += too_old
                c.timeStreamCallsMs += ms
                c.latestStreamCallTime = int(time.time() * 1000)
                if window_scn >= 0:
                    c.maxStreamWinScn = max(c.maxStreamWinScn, window_scn)
                    low = c.minStreamWinScn
                    c.minStreamWinScn = window_scn if low < 0 else min(low, window_scn)
            elif kind == "sources":
                c.numSourcesCalls += 1
                c.numErrSources += error
            elif kind == "register":
                c.numRegisterCalls += 1
                c.numErrRegister += error
            elif kind == "bootstrap":
                c.numBootstrapCalls += 1
            else:
                c.numOtherCalls += 1

    def connected(self) -> list[str]:
        now = time.time()
        return sorted(
            name
            for name, s in self.clients.items()
            if s.in_flight or now - s.last_seen < CONNECTED_SECONDS
        )

    def rates(self, inbound_events: int) -> tuple[float, float, float]:
        """(inbound events/s, outbound events/s, outbound bytes/s)"""
        now = time.monotonic()
        current = (now, inbound_events, self.total.events, self.total.bytes)
        if self._sample is None:
            self._sample = current
        elif now - self._sample[0] >= 1.0:
            dt = now - self._sample[0]
            self._rates = (
                (inbound_events - self._sample[1]) / dt,
                (self.total.events - self._sample[2]) / dt,
                (self.total.bytes - self._sample[3]) / dt,
            )
            self._sample = current
        return self._rates

    def outbound(self) -> dict[str, Any]:
        return {
            "total": asdict(self.total),
            "clients": {name: asdict(s) for name, s in sorted(self.clients.items())},
            "connected": self.connected(),
        }
