"""Every example of the README's user-facing sections runs as written.

Against a real ``segmentstore serve`` (127.0.0.1, ephemeral ports, the README's fixed
ports substituted), each block of a tested section is run by the rule for its kind, and
every failure names the block's README line:

* Python blocks run in a fresh interpreter (``-W error::RuntimeWarning``): exit 0, nothing
  on stderr. A fragment is made a program by its note: ``<!-- test-wrap: coroutine -->``
  runs it inside ``async def main()`` (``asyncio`` and ``segmentstore_client``
  imported), ``<!-- test-wrap: async -->`` also with ``client`` connected.
* Terminal sessions (lines ``$ command`` then its output) run in order in one directory
  against a fresh server with its controller (``SEGMENTSTORE_ENDPOINT``,
  ``SEGMENTSTORE_CONTROLLER`` and ``SEGMENTSTORE_METRICS_URL`` point at it): exit 0 and
  the output shown, compared line by line with runs of spaces collapsed; wildcards are
  ``...``, ISO timestamps and durations (``0.9 ms``), the only parts that change between
  runs. A command whose comment says ``Ctrl-C`` follows forever: once it has printed, it
  must still run, then end with 130 on SIGINT without a traceback.
* ``scripts/run`` blocks (Two commands, Quick start) start the server as written with
  ``--port 0 --http-port 0 --controller-port -1 --data-dir <tmp>`` appended (the later
  flag wins) and check its ready line; a ``curl`` line runs against the last one started.
* The Security set-up (its shell block, then its Python block) runs in
  ``test_security_example``.
* Spark blocks need a Spark session and a DataFrame: here their ``.option("name", ...)``
  names are checked against the source's option table and a ``.save()`` must follow a
  ``.mode()`` (Spark's default mode is refused for Python sources)
  (``test_spark_block_options``; the option table itself is compared with the source's
  in ``tests/spark/test_codec.py``); ``tests/spark/test_readme_spark.py`` runs them in the
  suite's session when ``SEGMENTSTORE_TEST_README_SPARK=1``.
* Not run, by rule: a block preceded by ``<!-- no-test: reason -->`` (the one way to
  leave a block out by hand, see ``readme_blocks.py``) and a benchmark (every command
  line calls ``scripts/bench_*``). A block of a tested section that no rule covers
  fails ``test_every_block_is_covered``.

About 40 s on an idle machine (1-2 min at load 8): five server starts, ~25 short CLI
processes, nine Python blocks (README section "README examples, tested").
"""

from __future__ import annotations

import os
import queue
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from segmentstore.server.launcher import METRICS, READY, ServerProcess

from .readme_blocks import Block, blocks

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
BLOCKS = blocks(README.read_text(encoding="utf-8"))
BIN = Path(sys.executable).parent
CONTROLLER = re.compile(r"controller on ((?:tcp|tls)://[0-9.]+:(\d+))")

# The user-facing sections: level-2 title -> the level-3 titles tested under it (None: all).
TESTED: dict[str, set[str] | None] = {
    "Two commands": None,
    "Quick start": None,
    "Client": {"", "Streams: routing keys, reader groups, transactions"},
    "Spark": {
        "Install on the driver and the executors",
        "Batch",
        "Streams",
        "Save modes",
        "TLS and credentials",
        "Streaming",
        "Older Spark: `foreachPartition` (at-least-once)",
    },
    "Tables": {""},
    "Command line": None,
    "Formats": None,
    "Streams": {""},
    "Relay (HTTP)": {""},
    "Security": None,
}


def in_tested_section(b: Block) -> bool:
    subsections = TESTED.get(b.section, set())
    return subsections is None or b.subsection in subsections


def is_benchmark(b: Block) -> bool:
    lines = [ln for ln in b.body.splitlines() if ln.strip() and not ln.startswith("#")]
    return bool(lines) and all(re.search(r"scripts/bench_\w+\.py", ln) for ln in lines)


def kind(b: Block) -> str:
    """Which rule covers a block of a tested section ("" = none)."""
    if b.section == "Spark":
        return "spark"  # options checked here, run in tests/spark unless marked no-test
    if b.no_test:
        return "no-test"
    if is_benchmark(b):
        return "benchmark"
    if b.section == "Security":
        return "security"
    if b.lang == "python":
        return "python"
    lines = [ln for ln in b.body.splitlines() if ln.strip()]
    if lines and lines[0].startswith("$ "):
        return "session"
    if lines and all(re.match(r"(\w+=\S+ )*(scripts/run|curl )", ln) for ln in lines):
        return "run"
    return ""


SELECTED = [b for b in BLOCKS if in_tested_section(b)]


def by_kind(k: str) -> list[Block]:
    return [b for b in SELECTED if kind(b) == k]


def ids(b: Block) -> str:
    return f"line{b.line}"


def test_every_block_is_covered() -> None:
    assert len(SELECTED) >= 20, "the README's sections moved: update TESTED"
    uncovered = [b.where() for b in SELECTED if not kind(b)]
    assert uncovered == [], "blocks no rule runs or marks (<!-- no-test: reason -->)"
    for k in ("python", "session", "run", "spark", "security"):
        assert by_kind(k), f"no README block of kind {k!r} found: the rules went stale"


# -- helpers ------------------------------------------------------------------------------


def clean_env(**extra: str) -> dict[str, str]:
    """The caller's environment without SEGMENTSTORE_* settings, the venv first on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEGMENTSTORE_")}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"
    env["SEGMENTSTORE_LOG_FILE_MB"] = "4"  # as every test server (tests/conftest.py)
    env.update(extra)
    return env


class Background:
    """A server started from a README command line, its stderr read by a thread."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.log: list[str] = []
        self.ready_line = ""
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        with self.proc.stderr:
            for line in self.proc.stderr:
                self.lines.put(line)

    def ready(self, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            self.log.append(line)
            if READY.search(line):
                self.ready_line = line
                return line
        self.stop()
        raise AssertionError("no ready line:\n" + "".join(self.log[-30:]))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


def strip_comment(line: str) -> str:
    return re.sub(r"\s+#\s.*$", "", line).strip()


def logical_lines(body: str) -> list[str]:
    """Command lines with backslash continuations joined, comments and blanks dropped."""
    out: list[str] = []
    pending = ""
    for raw in body.splitlines():
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        line = strip_comment(pending + raw)
        pending = ""
        if line and not line.startswith("#"):
            out.append(line)
    return out


# -- Python blocks ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, str]]:
    """One server with its controller for the Python blocks (they use their own names or
    exist_ok=True, so they may share it)."""
    s = ServerProcess(tmp_path_factory.mktemp("readme-store"), ["--controller-port", "0"])
    s.start()
    controller = next(m.group(1) for ln in s.log if (m := CONTROLLER.search(ln)))
    yield s, controller
    s.kill()


def substitute(code: str, endpoint: str, controller: str) -> str:
    for host in ("127.0.0.1", "localhost"):
        code = code.replace(f"tcp://{host}:12345", endpoint)
        code = code.replace(f"tcp://{host}:9090", controller)
    return code


def wrapped(block: Block, code: str, endpoint: str, controller: str) -> str:
    """A fragment made a program by its ``test-wrap`` note: ``coroutine`` runs it inside
    ``async def main()``, ``async`` also inside ``async with connect(...) as client``."""
    how = block.wrap
    if how is None:
        return code
    assert how in ("async", "coroutine"), f"{block.where()}: unknown test-wrap {how!r}"
    indent = "        " if how == "async" else "    "
    body = "".join(f"{indent}{ln}\n" for ln in code.splitlines())
    head = "import asyncio, segmentstore_client\nasync def main():\n"
    if how == "async":
        head += (
            f"    async with segmentstore_client.connect({endpoint!r}, "
            f"controller={controller!r}) as client:\n"
        )
    return head + body + "asyncio.run(main())\n"


def run_python(block: Block, code: str, cwd: Path) -> None:
    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-W", "error::RuntimeWarning", "-c", code],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=cwd,
            env=clean_env(),
        )

    proc = run()
    if proc.returncode == -signal.SIGSEGV and "pravega_client" in code:
        # The official client (pravega 0.3.x, Rust) dies with SIGSEGV at interpreter exit
        # now and then, after its work is done (README Streams). Its own crash, not ours:
        # the block runs once more, and a crash that repeats still fails.
        proc = run()
    assert proc.returncode == 0, f"{block.where()} failed:\n{proc.stderr[-3000:]}"
    assert proc.stderr == "", f"{block.where()} wrote to stderr:\n{proc.stderr[-3000:]}"


@pytest.mark.parametrize("block", by_kind("python"), ids=ids)
def test_python_block(block: Block, store: tuple[ServerProcess, str], tmp_path: Path) -> None:
    server, controller = store
    code = substitute(block.body, server.endpoint, controller)
    run_python(block, wrapped(block, code, server.endpoint, controller), tmp_path)


# -- terminal sessions --------------------------------------------------------------------

# The parts of an output line that change between runs, and what they match.
WILDCARDS: list[tuple[str, str]] = [
    (r"\w*\.\.\.", r".*?"),  # an elision (of the word it ends, if any)
    (r"\d{4}-\d\d-\d\dT[0-9:.]+Z", r"\d{4}-\d\d-\d\dT[0-9:.]+Z"),  # a timestamp
    (r"\d+(?:\.\d+)? ms\b", r"[0-9.]+\s+ms"),  # a duration
    (r"\d+(?= segmentstore series)", r"\d+"),  # a count of metrics
]
WILD = re.compile("|".join(f"({w})" for w, _ in WILDCARDS))


def _literal(text: str) -> str:
    return re.sub(r"(?:\\ )+", r"\\s+", re.escape(text))


def line_pattern(expected: str) -> re.Pattern[str]:
    """A pattern for one expected output line: runs of spaces match any run of spaces,
    the WILDCARDS anything of their kind, the rest itself."""
    expected = expected.strip()
    parts: list[str] = []
    pos = 0
    for m in WILD.finditer(expected):
        parts.append(_literal(expected[pos : m.start()]))
        parts.append(WILDCARDS[(m.lastindex or 1) - 1][1])
        pos = m.end()
    parts.append(_literal(expected[pos:]))
    return re.compile("".join(parts))


def sessions(body: str) -> Iterator[tuple[str, list[str]]]:
    """(command, expected output lines) per ``$`` line."""
    command: str | None = None
    expected: list[str] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            if command is not None:
                yield command, expected
            command, expected = line[2:], []
        elif line.strip():
            expected.append(line)
    if command is not None:
        yield command, expected


def follow(command: str, env: dict[str, str], cwd: Path, where: str) -> None:
    """A following command prints the events it has, keeps running, and ends with 130
    on Ctrl-C (SIGINT once it has printed, so a loaded machine's slow start is no
    failure)."""
    proc = subprocess.Popen(
        ["bash", "-c", command],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        with proc.stdout:
            for line in proc.stdout:
                lines.put(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    out: list[str] = []
    try:
        try:
            out.append(lines.get(timeout=60))
        except queue.Empty:
            pytest.fail(f"{where}: printed nothing in 60 s")
        time.sleep(0.5)
        assert proc.poll() is None, f"{where}: ended by itself:\n{''.join(out)}"
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(20)
        reader.join(10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
    while not lines.empty():
        out.append(lines.get())
    text = "".join(out)
    assert proc.returncode == 130, f"{where}: exit {proc.returncode}\n{text}"
    assert "Traceback" not in text, f"{where}:\n{text}"


@pytest.mark.parametrize("block", by_kind("session"), ids=ids)
def test_terminal_session(block: Block, tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", ["--controller-port", "0"])
    server.start()
    try:
        controller = next(m.group(1) for ln in server.log if (m := CONTROLLER.search(ln)))
        metrics = f"http://127.0.0.1:{server.http_port}/metrics"
        env = clean_env(
            SEGMENTSTORE_ENDPOINT=server.endpoint,
            SEGMENTSTORE_CONTROLLER=controller,
            SEGMENTSTORE_METRICS_URL=metrics,
        )
        for raw, expected in sessions(block.body):
            where = f"{block.where()}: `{raw.strip()}`"
            command = strip_comment(raw)
            if "Ctrl-C" in raw:
                follow(command, env, tmp_path, where)
                continue
            proc = subprocess.run(
                ["bash", "-c", command],
                cwd=tmp_path,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=60,
            )
            out = proc.stdout
            assert proc.returncode == 0, f"{where} exited {proc.returncode}:\n{out}"
            got = [ln for ln in out.splitlines() if ln.strip()]
            want = [
                e.replace("tcp://127.0.0.1:12345", server.endpoint).replace(
                    "http://127.0.0.1:9091/metrics", metrics
                )
                for e in expected
            ]
            assert len(got) == len(want), f"{where} printed:\n{out}\nthe README shows:\n" + (
                "\n".join(expected)
            )
            for g, w in zip(got, want, strict=True):
                assert line_pattern(w).fullmatch(g.strip()), f"{where}:\n got  {g}\n want {w}"
    finally:
        server.kill()


def test_line_pattern_wildcards() -> None:
    pat = line_pattern("demo/0       45      0       4  no      2026-11-24T07:31:07.080Z")
    assert pat.fullmatch("demo/0  45  0  4  no  2027-01-02T00:00:00.5Z")
    assert not pat.fullmatch("demo/0  46  0  4  no  2027-01-02T00:00:00.5Z")
    pat = line_pattern("ok  round trip  6.6 ms  created ... _health/3201.../0")
    assert pat.fullmatch("ok round trip 12.5 ms created ... _health/9af0c1/0")
    assert not pat.fullmatch("FAIL round trip 12.5 ms created _health/9af0c1/0")


# -- scripts/run blocks -------------------------------------------------------------------


def _skip_outside_ci(reason: str) -> None:
    """A tool or set-up a developer's machine may lack skips the test there; in CI
    (``CI=true``, where ``scripts/test`` made ./.venv and curl and openssl are installed)
    it fails instead, so the block is never left untested unnoticed."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: not skipped)")
    pytest.skip(reason)


@pytest.mark.parametrize("block", by_kind("run"), ids=ids)
def test_run_block(block: Block, tmp_path: Path) -> None:
    if not (ROOT / ".venv/bin/segmentstore").exists():
        _skip_outside_ci("scripts/run would first install ./.venv (scripts/test makes it)")
    last: Background | None = None
    try:
        for n, line in enumerate(logical_lines(block.body)):
            where = f"{block.where()}: `{line}`"
            words = shlex.split(line)
            assignments = dict(w.split("=", 1) for w in words if re.match(r"\w+=", w))
            words = words[len(assignments) :]
            if words[0] == "curl":
                assert last is not None, f"{where}: no server started before it"
                if shutil.which("curl") is None:
                    _skip_outside_ci("curl is not installed")
                m = METRICS.search(last.ready_line)
                assert m, where
                command = line.replace("127.0.0.1:9091", f"127.0.0.1:{m.group(2)}")
                proc = subprocess.run(
                    ["bash", "-o", "pipefail", "-c", command],
                    capture_output=True,
                    text=True,
                    timeout=30,
                )
                assert proc.returncode == 0 and proc.stdout, f"{where}: {proc.stderr}"
                continue
            assert words[0] == "scripts/run", where
            if last is not None:
                assert last.stop() == 0, f"{where}: the previous server did not stop cleanly"
            args = [
                *words[1:],
                *("--port", "0", "--http-port", "0", "--controller-port", "-1"),
                *("--data-dir", str(tmp_path / f"data{n}")),
            ]
            last = Background(
                [str(ROOT / "scripts/run"), *args], clean_env(**assignments), tmp_path
            )
            ready = last.ready()
            fsync = assignments.get("SEGMENTSTORE_FSYNC", "always")
            assert f"fsync={fsync}" in ready, f"{where}: {ready}"
        assert last is not None
        assert last.stop() == 0, f"{block.where()}: the server did not stop cleanly on SIGTERM"
    finally:
        if last is not None:
            last.stop()


# -- Security -----------------------------------------------------------------------------


def test_security_example(tmp_path: Path) -> None:
    """The secure set-up as written (certificate, secret, users, server with TLS and auth;
    the server's ports made ephemeral), then the Python block against it."""
    if shutil.which("openssl") is None:
        _skip_outside_ci("openssl is not installed")
    shell = [b for b in by_kind("security") if b.lang != "python"]
    python = [b for b in by_kind("security") if b.lang == "python"]
    assert len(shell) == 1 and len(python) == 1, "the Security section's blocks changed"
    server: Background | None = None
    try:
        for line in logical_lines(shell[0].body):
            where = f"{shell[0].where()}: `{line}`"
            if line.startswith("segmentstore serve"):
                line = line.replace("--controller-port 9090", "--controller-port 0")
                line += f" --port 0 --http-port 0 --data-dir {tmp_path / 'data'}"
                server = Background(["bash", "-c", "exec " + line], clean_env(), tmp_path)
                server.ready()
                continue
            proc = subprocess.run(
                ["bash", "-c", line],
                cwd=tmp_path,
                env=clean_env(),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=60,
                start_new_session=True,  # no terminal: a prompt would fail, not wait
            )
            assert proc.returncode == 0, f"{where} exited {proc.returncode}:\n{proc.stderr}"
        assert server is not None, f"{shell[0].where()}: no segmentstore serve line"
        port = READY.search(server.ready_line)
        controller = CONTROLLER.search(server.ready_line)
        assert port and controller, server.ready_line
        code = python[0].body.replace("localhost:12345", f"localhost:{port.group(2)}")
        code = code.replace("localhost:9090", f"localhost:{controller.group(2)}")
        run_python(python[0], wrapped(python[0], code, "", ""), tmp_path)
    finally:
        if server is not None:
            server.stop()


# -- Spark --------------------------------------------------------------------------------

SPARK_OWN_OPTIONS = {"checkpointLocation"}  # Spark's, not the source's


@pytest.mark.parametrize("block", by_kind("spark"), ids=ids)
def test_spark_block_options(block: Block) -> None:
    """Every ``.option(...)`` of a Spark example is one the source takes in that
    direction (read or write, from the nearest ``read``/``write`` before it), and every
    ``.mode(...)`` one Spark 4 lets a Python source have."""
    from segmentstore_client.spark.option_table import OptionError, normalize

    if block.lang != "python":
        return  # install and spark-submit lines: nothing of ours to check
    for m in re.finditer(r'\.option\(\s*"(\w+)"', block.body):
        name = m.group(1)
        if name in SPARK_OWN_OPTIONS:
            continue
        before = re.findall(r"\.(read|write)(?:Stream)?\b", block.body[: m.start()])
        assert before, f"{block.where()}: .option({name!r}) before any read or write"
        try:
            normalize({name: "x"}, before[-1])
        except OptionError as e:
            pytest.fail(f"{block.where()}: {e}")
    for mode in re.findall(r'\.mode\("(\w+)"\)', block.body):
        assert mode in ("append", "overwrite"), f"{block.where()}: .mode({mode!r})"
    # Spark's default mode, errorifexists, is refused for Python sources: a batch write
    # names its mode.
    for m in re.finditer(r"\.save\(\)", block.body):
        chain = block.body[block.body.rfind(".write", 0, m.start()) : m.start()]
        assert ".mode(" in chain, f"{block.where()}: a write without .mode(...)"
