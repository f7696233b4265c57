"""The relay's status page at ``/``: sources, partitions, rates and connected consumers.

Contract: the page is complete as served (numbers rendered on the server, so it reads
right without JavaScript) and then refreshes itself from ``/stats`` once a second. Every
value shown has an element id (``src-<id>-events``, ``in-events``, ``out-events``...) so a
test or a person's browser tooling can find it. Text from the store (segment names,
client names) is HTML-escaped on the server and set as text (never HTML) in the browser.
"""

from __future__ import annotations

import html
import time
from typing import Any

from aiohttp import web

from .routes import SERVICE, stats_snapshot

_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em} h2{font-size:1.1em;margin-top:1.4em}
table{border-collapse:collapse} td,th{border:1px solid #ccc;padding:.3em .6em;text-align:right}
th{background:#eee} td.name{text-align:left;font-family:monospace}
.tiles{display:flex;gap:1em} .tile{border:1px solid #ccc;padding:.6em 1em;border-radius:6px}
.tile b{font-size:1.4em;display:block}
"""

_SCRIPT = """
const fmt = (n) => Number(n).toLocaleString('en-US');
function when(ms){ return ms ? new Date(ms).toISOString().replace('T',' ').slice(0,19) : '-'; }
function setText(id, v){ const e = document.getElementById(id); if (e) e.textContent = v; }
function rowFor(id, s){
  let row = document.getElementById('src-' + id);
  if (!row) {
    row = document.createElement('tr'); row.id = 'src-' + id;
    for (const f of ['id','name','partitions','state','events','bytes','minScn','maxScn','first','latest']) {
      const td = document.createElement('td'); td.id = 'src-' + id + '-' + f;
      if (f === 'name' || f === 'partitions') td.className = 'name';
      row.appendChild(td);
    }
    document.getElementById('sources').appendChild(row);
  }
  return row;
}
async function refresh(){
  try {
    const r = await fetch('/stats', {cache: 'no-store'}); const st = await r.json();
    setText('in-events', fmt(st.inbound.events)); setText('in-rate', fmt(st.inbound.events_per_s));
    setText('in-bytes', fmt(st.inbound.bytes));
    setText('out-events', fmt(st.outbound.total.events)); setText('out-rate', fmt(st.outbound.events_per_s));
    setText('out-bytes', fmt(st.outbound.total.bytes));
    setText('consumers', st.outbound.connected.length);
    for (const [id, s] of Object.entries(st.inbound.sources)) {
      rowFor(id, s);
      setText('src-'+id+'-id', id); setText('src-'+id+'-name', s.name);
      setText('src-'+id+'-partitions', s.partitions.join(', ')); setText('src-'+id+'-state', s.state);
      setText('src-'+id+'-events', fmt(s.events)); setText('src-'+id+'-bytes', fmt(s.bytes));
      setText('src-'+id+'-minScn', s.minScn); setText('src-'+id+'-maxScn', s.maxScn);
      setText('src-'+id+'-first', when(s.timestampFirstEvent)); setText('src-'+id+'-latest', when(s.timestampLatestEvent));
    }
    const ul = document.getElementById('clients'); ul.replaceChildren();
    for (const name of st.outbound.connected) {
      const c = st.outbound.clients[name]; const li = document.createElement('li');
      li.textContent = name + ': ' + fmt(c.events) + ' events, ' + fmt(c.bytes) + ' bytes';
      ul.appendChild(li);
    }
    setText('updated', new Date().toISOString());
  } catch (e) { setText('updated', 'refresh failed: ' + e); }
}
setInterval(refresh, 1000); refresh();
"""


def _when(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) if ms else "-"


def _row(src_id: str, s: dict[str, Any]) -> str:
    cells = [
        ("id", src_id),
        ("name", s["name"]),
        ("partitions", ", ".join(s["partitions"])),
        ("state", s["state"]),
        ("events", f"{s['events']:,}"),
        ("bytes", f"{s['bytes']:,}"),
        ("minScn", str(s["minScn"])),
        ("maxScn", str(s["maxScn"])),
        ("first", _when(s["timestampFirstEvent"])),
        ("latest", _when(s["timestampLatestEvent"])),
    ]
    tds = "".join(
        f'<td id="src-{src_id}-{f}"{" class=name" if f in ("name", "partitions") else ""}>'
        f"{html.escape(v)}</td>"
        for f, v in cells
    )
    return f'<tr id="src-{src_id}">{tds}</tr>'


def render(st: dict[str, Any]) -> str:
    inbound, outbound = st["inbound"], st["outbound"]
    rows = "".join(_row(i, s) for i, s in inbound["sources"].items())
    clients = "".join(
        f"<li>{html.escape(name)}: {outbound['clients'][name]['events']:,} events</li>"
        for name in outbound["connected"]
    )
    tiles = [
        ("in-events", "events appended", f"{inbound['events']:,}"),
        ("in-rate", "appended events/s", f"{inbound['events_per_s']:,}"),
        ("in-bytes", "bytes appended", f"{inbound['bytes']:,}"),
        ("out-events", "events served", f"{outbound['total']['events']:,}"),
        ("out-rate", "served events/s", f"{outbound['events_per_s']:,}"),
        ("out-bytes", "bytes served", f"{outbound['total']['bytes']:,}"),
        ("consumers", "connected consumers", str(len(outbound["connected"]))),
    ]
    tile_html = "".join(
        f'<div class="tile">{label}<b id="{i}">{value}</b></div>' for i, label, value in tiles
    )
    head = "".join(
        f"<th>{h}</th>"
        for h in ("id", "name", "partitions", "state", "events", "bytes", "min SCN",
                  "max SCN", "first event", "latest event")
    )  # fmt: skip
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>segmentstore relay</title>
<style>{_STYLE}</style></head>
<body><h1>segmentstore relay</h1>
<div class="tiles">{tile_html}</div>
<h2>Sources</h2>
<table><thead><tr>{head}</tr></thead><tbody id="sources">{rows}</tbody></table>
<h2>Connected consumers</h2><ul id="clients">{clients}</ul>
<p>Updated <span id="updated">{time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}</span>
(refreshes every second from <a href="/stats">/stats</a>)</p>
<script>{_SCRIPT}</script>
</body></html>"""


async def status_page(request: web.Request) -> web.Response:
    st = await stats_snapshot(request.app[SERVICE])
    return web.Response(text=render(st), content_type="text/html")
