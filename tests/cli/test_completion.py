"""``segmentstore completion bash``: the script completes subcommands, options and
choices when bash runs it (the completion function driven as bash's completer calls it)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from .conftest import run_cli

CASES = {
    "segmentstore se": "serve segment",
    "segmentstore segment t": "truncate tail",
    "segmentstore segment cat demo/0 --fo": "--follow --format",
    "segmentstore segment cat demo/0 --format ''": "text json records kafka events databus raw",
    "segmentstore table ''": "create get put rm ls info delete",
    "segmentstore --debug segment tail demo/0 --li": "--lines",
    "segmentstore health --no": "--no-metrics",
    "segmentstore completion ''": "bash zsh",
    "segmentstore segment write demo/0 --writer-id ''": "",  # free text: default completion
}


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_completion_script() -> None:
    r = run_cli("completion", "bash")
    assert r.returncode == 0 and r.stdout.startswith(b"# segmentstore completion")
    lines = ["set -u"]  # the function must not touch unset variables either
    for words in CASES:
        lines.append(
            f"COMP_WORDS=({words}); COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 )); _segmentstore; "
            'echo "${COMPREPLY[*]-}"'
        )
    out = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", r.stdout.decode() + "\n" + "\n".join(lines)],
        capture_output=True,
        timeout=30,
        check=True,
    )
    assert out.stdout.decode().splitlines() == list(CASES.values()), out.stderr
    assert run_cli("completion", "zsh").stdout.count(b"bashcompinit") == 2
    assert run_cli("completion", "fish").returncode == 2


@pytest.mark.skipif(shutil.which("zsh") is None, reason="needs zsh")
def test_zsh_runs_the_script_through_bashcompinit() -> None:
    # zsh calls the function under sh emulation (0-based arrays) and filters the
    # candidates by the typed prefix itself (compadd); the candidate sets are checked here.
    r = run_cli("completion", "zsh")
    probe = (
        '\nt() { emulate -L sh; COMP_WORDS=("$@"); COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ));'
        ' _segmentstore; echo "${COMPREPLY[*]}"; }\n'
        't segmentstore segment cat demo/0 --format ""\n'
        't segmentstore table ""\n'
        "t segmentstore --debug segment tail demo/0 --li\n"
    )
    out = subprocess.run(
        ["zsh", "-f", "-c", r.stdout.decode() + probe], capture_output=True, timeout=30, check=True
    )
    lines = out.stdout.decode().splitlines()
    assert lines[0] == "text json records kafka events databus raw"
    assert lines[1] == "create get put rm ls info delete"
    assert "--lines" in lines[2].split() and "--follow" in lines[2].split()
