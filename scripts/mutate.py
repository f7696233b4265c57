"""A small mutation check over the server's and the storage's hot paths: it changes one
thing at a time (a named mutant, or a comparison flipped, an ``x += n`` / ``x -= n``
dropped, a call statement dropped, a boolean constant inverted inside the functions
listed in ``TARGETS``), runs the fast tests that guard that code, and lists the mutants
no test noticed ("survivors").

    .venv/bin/python scripts/mutate.py              # every target, a few minutes
    .venv/bin/python scripts/mutate.py --named      # only the named mutants (issue 14)
    .venv/bin/python scripts/mutate.py --list       # the mutants, without running tests

The worktree is never modified: the packages are copied to a temporary directory, each
mutant is written into the copy, and the tests run with that copy first on PYTHONPATH.
A test run that fails, or outlives ``--timeout``, kills the mutant. Exit code 0; the
counts and survivors are printed (``--json FILE`` writes them too).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {
    "segmentstore": ROOT / "segmentstore",
    "segmentstore_client": ROOT / "client" / "segmentstore_client",
}
FAST_SERVER_TESTS = [
    "tests/server/test_harness.py",
    "tests/server/test_harness_reads.py",
    "tests/server/test_harness_appends.py",
    "tests/server/test_harness_close.py",
    "tests/server/test_append_session.py",
]
LIVE_RESEND_TESTS = "not resend_of and not repeat_on"  # those start a real server


@dataclass(frozen=True)
class Target:
    path: str  # relative to ROOT
    functions: tuple[str, ...]  # qualified names (Class.method) whose code is mutated
    tests: tuple[str, ...]
    select: str = ""  # pytest -k expression


TARGETS = [
    Target(
        "segmentstore/server/appends.py",
        (
            "Appends.append",
            "Appends._drain",
            "Appends.appended",
            "Appends.precheck",
            "Appends._drain_budget",
        ),
        tuple(FAST_SERVER_TESTS),
        LIVE_RESEND_TESTS,
    ),
    Target(
        "segmentstore/server/connection.py",
        (
            "Connection.data_received",
            "Connection.process",
            "Connection.update_reading",
            "Connection._output_full",
            "Connection.reserve_output",
            "Connection._settle_output",
            "Connection.check_timeouts",
            "Connection.send",
            "Connection._flush",
            "Connection.pause_writing",
            "Connection.resume_writing",
            "Connection.connection_lost",
        ),
        tuple(FAST_SERVER_TESTS),
        LIVE_RESEND_TESTS,
    ),
    Target(
        "segmentstore/server/reads.py",
        (
            "Reads.size",
            "Reads.read_now",
            "Reads.send_read",
            "Reads.read_segment",
            "Reads.disk_slot",
        ),
        tuple(FAST_SERVER_TESTS),
        LIVE_RESEND_TESTS,
    ),
    Target(
        "segmentstore/storage/container_reads.py",
        (
            "ContainerReads.try_read",
            "ContainerReads.read",
            "ContainerReads._read_chunks",
            "ContainerReads._wait",
        ),
        ("tests/storage/test_reads.py",),
    ),
    Target(
        "segmentstore/server/budget.py",
        ("Budget.charge", "Budget.wait", "Budget.over", "Budget.fair_share"),
        tuple(FAST_SERVER_TESTS),
        LIVE_RESEND_TESTS,
    ),
    Target(
        "segmentstore/server/append_session.py",
        ("classify", "step"),
        ("tests/server/test_append_session.py",),
        LIVE_RESEND_TESTS,
    ),
    Target(
        "segmentstore/storage/read_cache.py",
        ("SegmentCache.read", "SegmentCache.evict_front", "ReadCache.add", "ReadCache.evict"),
        ("tests/storage/test_read_cache.py",),
    ),
]

# The mutants issue 14 names: each must be killed by the in-memory harness.
NAMED = [
    (
        "inflight bytes never decremented",
        "segmentstore/server/appends.py",
        "            self.inflight_bytes -= len(append.data)\n",
        "            pass\n",
    ),
    (
        "socket pause removed",
        "segmentstore/server/connection.py",
        "                self.transport.pause_reading()\n",
        "                pass\n",
    ),
    (
        "> made >= on last_acked",
        "segmentstore/server/appends.py",
        "        if number > state.last_acked:",
        "        if number >= state.last_acked:",
    ),
]

_SWAP = {ast.Gt: ">=", ast.GtE: ">", ast.Lt: "<=", ast.LtE: "<", ast.Eq: "!=", ast.NotEq: "=="}
_TEXT = {ast.Gt: ">", ast.GtE: ">=", ast.Lt: "<", ast.LtE: "<=", ast.Eq: "==", ast.NotEq: "!="}


@dataclass(frozen=True)
class Mutant:
    name: str
    target: Target
    source: str  # the whole mutated file


def functions(tree: ast.Module, wanted: tuple[str, ...]) -> list[ast.AST]:
    found: list[ast.AST] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in wanted:
            found.append(node)
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                qual = f"{node.name}.{getattr(item, 'name', '')}"
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and qual in wanted:
                    found.append(item)
    return found


def replace_span(lines: list[str], node: ast.AST, text: str) -> str | None:
    """The file with ``node``'s source (on one line) replaced by ``text``."""
    start, end = node.lineno, node.end_lineno  # type: ignore[attr-defined]
    if start != end:
        return None
    line = lines[start - 1]
    c0, c1 = node.col_offset, node.end_col_offset  # type: ignore[attr-defined]
    out = list(lines)
    out[start - 1] = line[:c0] + text + line[c1:]
    return "".join(out)


def auto_mutants(target: Target) -> list[Mutant]:
    text = (ROOT / target.path).read_text()
    lines = text.splitlines(keepends=True)
    tree = ast.parse(text)
    mutants: list[Mutant] = []
    for fn in functions(tree, target.functions):
        for node in ast.walk(fn):
            where = f"{target.path}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _SWAP:
                op = type(node.ops[0])
                left = ast.get_source_segment(text, node.left)
                right = ast.get_source_segment(text, node.comparators[0])
                if left is None or right is None:
                    continue
                src = replace_span(lines, node, f"{left} {_SWAP[op]} {right}")
                if src:
                    mutants.append(Mutant(f"{where} {_TEXT[op]} -> {_SWAP[op]}", target, src))
            elif isinstance(node, ast.AugAssign | ast.Expr) and not (
                isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            ):
                if isinstance(node, ast.Expr) and not isinstance(node.value, ast.Call | ast.Await):
                    continue
                seg = ast.get_source_segment(text, node) or ""
                src = replace_span(lines, node, "pass")
                if src:
                    mutants.append(Mutant(f"{where} dropped `{seg[:60]}`", target, src))
            elif isinstance(node, ast.Constant) and isinstance(node.value, bool):
                src = replace_span(lines, node, str(not node.value))
                if src:
                    mutants.append(Mutant(f"{where} {node.value} -> {not node.value}", target, src))
    return mutants


def named_mutants() -> list[Mutant]:
    by_path = {t.path: t for t in TARGETS}
    out = []
    for name, path, old, new in NAMED:
        text = (ROOT / path).read_text()
        if text.count(old) != 1:
            raise SystemExit(f"named mutant {name!r}: the line is not in {path} exactly once")
        out.append(Mutant(f"[named] {name}", by_path[path], text.replace(old, new)))
    return out


def run(mutant: Mutant, copy: Path, timeout: float) -> str:
    """'killed', 'survived' or 'timeout' (a hang counts as killed)."""
    dest = copy / mutant.target.path.replace("client/", "", 1)
    original = dest.read_text()
    dest.write_text(mutant.source)
    try:
        # Run from the copy: ``python -m`` puts the working directory first on sys.path,
        # ahead of the editable install of the worktree.
        cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider"]
        cmd += ["-c", str(ROOT / "pyproject.toml"), "--rootdir", str(ROOT)]
        cmd += [str(ROOT / t) for t in mutant.target.tests]
        if mutant.target.select:
            cmd += ["-k", mutant.target.select]
        env = dict(os.environ, PYTHONPATH=str(copy), PYTHONDONTWRITEBYTECODE="1")
        try:
            done = subprocess.run(
                cmd, cwd=copy, env=env, capture_output=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            return "timeout"
        return "survived" if done.returncode == 0 else "killed"
    finally:
        dest.write_text(original)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--named", action="store_true", help="only the named mutants")
    p.add_argument("--list", action="store_true", help="list the mutants and stop")
    p.add_argument("--only", help="only targets whose path contains this")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per test run")
    p.add_argument("--json", type=Path, help="write the results here")
    args = p.parse_args()
    mutants = named_mutants()
    if not args.named:
        for t in TARGETS:
            if args.only is None or args.only in t.path:
                mutants += auto_mutants(t)
    if args.list:
        for m in mutants:
            print(m.name)
        print(f"{len(mutants)} mutants")
        return 0
    results: dict[str, list[str]] = {"killed": [], "survived": [], "timeout": []}
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mutate-") as tmp:
        copy = Path(tmp)
        for name, src in PACKAGES.items():
            shutil.copytree(src, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
        baselines = {(m.target.tests, m.target.select): m.target for m in mutants}
        for target in baselines.values():  # the unmutated copy must pass, or nothing counts
            clean = Mutant("baseline", target, (ROOT / target.path).read_text())
            if run(clean, copy, args.timeout) != "survived":
                raise SystemExit(f"the tests {target.tests} fail without a mutant; fix them first")
        for i, m in enumerate(mutants, 1):
            outcome = run(m, copy, args.timeout)
            results[outcome].append(m.name)
            print(f"[{i}/{len(mutants)}] {outcome:8} {m.name}", flush=True)
    total = len(mutants)
    killed = len(results["killed"]) + len(results["timeout"])
    print(
        f"\n{total} mutants: {killed} killed ({len(results['timeout'])} by timeout), "
        f"{len(results['survived'])} survived, {time.monotonic() - t0:.0f} s"
    )
    for name in results["survived"]:
        print(f"  survived: {name}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
