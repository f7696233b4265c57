"""The flags, defaults, environment variables and TOML keys the README names exist, with
the defaults it states.

Read from the README's text (prose and code) in the sections of
``test_readme_examples.TESTED`` plus "Server": every ``--flag`` is an option of the
``segmentstore`` command (of any subcommand) or, when a script is named on its line or
before it in its paragraph (``scripts/NAME.py``), an option in that script's source,
or another tool (``FOREIGN``); every default stated as "`--flag` (default N)", "`name`
(default N)", "`name` [N]" or "`--flag` (N)" equals the server setting's default
(``segmentstore.config.ServerConfig``) or the parser's; every ``SEGMENTSTORE_NAME`` is a
server setting or appears in the project's source; every key said to be a TOML key is a
setting. No server runs: about a second.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from segmentstore import cli
from segmentstore.config import ENV_PREFIX, ServerConfig

from .test_readme_examples import README, ROOT, TESTED

# Flags of other tools that the README mentions (not ours to check).
FOREIGN = {
    "--py-files": "spark-submit",
    "--basetemp": "pytest",
    "--pid": "py-spy",
    "--rate": "py-spy (also `segmentstore bench --rate`)",
    "--threads": "py-spy",
    "--idle": "py-spy",
    "--format": "py-spy (also ours)",
    "--nonblocking": "py-spy",
}
SETTINGS = {f.name: f.default for f in dataclasses.fields(ServerConfig)}
MIB = 1024 * 1024
SERVER = {"", "Resource budgets and hostile peers"}  # of "Server": the settings' text


def lines() -> list[tuple[int, str]]:
    """(line number, text) of the checked sections."""
    out: list[tuple[int, str]] = []
    section = subsection = ""
    in_code = False
    for n, line in enumerate(README.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            in_code = not in_code
        heading = None if in_code else re.match(r"^(#{2,3}) (.+?)\s*$", line)
        if heading:
            if len(heading.group(1)) == 2:
                section, subsection = heading.group(2), ""
            else:
                subsection = heading.group(2)
        subsections = SERVER if section == "Server" else TESTED.get(section, set())
        if subsections is None or subsection in subsections:
            out.append((n, line))
    return out


LINES = lines()
TEXT = "\n".join(line for _, line in LINES)


def parser_options() -> dict[str, list[Any]]:
    """Every option string of the command and its subcommands -> its defaults (for an
    option whose default is resolved later, None or argparse.SUPPRESS: the "default N"
    of its help text)."""
    found: dict[str, list[Any]] = {}

    def walk(p: argparse.ArgumentParser) -> None:
        for action in p._actions:
            default = action.default
            if default is None or default == argparse.SUPPRESS:
                m = re.search(r"default (\d+(?:\.\d+)?)\b(?!\.)", action.help or "")
                default = float(m.group(1)) if m else None
            for option in action.option_strings:
                found.setdefault(option, []).append(default)
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    walk(sub)

    walk(cli._parser())
    return found


OPTIONS = parser_options()


def test_checked_text_is_there() -> None:
    assert len(LINES) > 1500, "the README's sections moved: update TESTED"


def test_every_flag_exists() -> None:
    problems = []
    scripts: list[str] = []  # the scripts named so far in this paragraph
    for n, line in LINES:
        if not line.strip():
            scripts = []
        scripts = re.findall(r"scripts/(\w+\.py)", line) or scripts
        for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", line):
            if flag in OPTIONS or flag in FOREIGN:
                continue
            source = "".join((ROOT / "scripts" / s).read_text() for s in scripts)
            if f'"{flag}"' not in source:
                where = f"segmentstore or {scripts}" if scripts else "segmentstore"
                problems.append(f"README.md:{n}: {where} has no option {flag}")
    assert problems == []


def _number(text: str) -> float:
    return float(text.replace(",", "").rstrip("."))


DEFAULT_PATTERNS = [
    # `--flag` (default N) / `--flag ARG` (..., default N) / `name` (default N s)
    re.compile(
        r"`(--?[a-z][a-z0-9-]*|[a-z][a-z0-9_]*)(?: [A-Z]+)?`[^`\n]{0,30}?default (-?\d[\d,.]*)"
    ),
    re.compile(r"`([a-z][a-z0-9_]*)` \[(\d[\d,]*)( MiB)?\]"),  # `name` [N] / [N MiB]
    re.compile(r"`(--[a-z][a-z0-9-]*)` \((\d[\d,]*)\)"),  # `--flag` (N)
]


def stated_defaults() -> list[tuple[int, str, float]]:
    found = []
    for n, line in LINES:
        for pattern in DEFAULT_PATTERNS:
            for m in pattern.finditer(line):
                value = _number(m.group(2)) * (MIB if m.lastindex == 3 and m.group(3) else 1)
                found.append((n, m.group(1), value))
    return found


def test_stated_defaults_are_the_defaults() -> None:
    found = stated_defaults()
    assert len(found) >= 20, found
    problems = []
    for n, name, value in found:
        setting = name.lstrip("-").replace("-", "_")
        if setting in SETTINGS:
            actual = [SETTINGS[setting]]
        elif name in OPTIONS:
            actual = OPTIONS[name]
        else:
            problems.append(f"README.md:{n}: {name} is neither a setting nor an option")
            continue
        if not any(isinstance(a, int | float) and float(a) == value for a in actual):
            problems.append(
                f"README.md:{n}: {name} defaults to {actual}, the README says {value:g}"
            )
    assert problems == []


def source_text() -> str:
    files = [*ROOT.glob("segmentstore/**/*.py"), *ROOT.glob("client/**/*.py")]
    files += [p for p in (ROOT / "scripts").iterdir() if p.is_file()]
    files += ROOT.glob("tests/**/*.py")  # the suite's own knobs (SEGMENTSTORE_TEST_*)
    return "".join(p.read_text(encoding="utf-8", errors="replace") for p in files)


def test_every_environment_variable_exists() -> None:
    source = source_text()
    problems = []
    for n, line in LINES:
        for var in re.findall(r"\bSEGMENTSTORE_[A-Z0-9_]*[A-Z0-9]\b", line):
            setting = var[len(ENV_PREFIX) :].lower()
            if setting in SETTINGS or setting == "config":
                continue
            if not re.search(rf"\b{var}\b", source):
                problems.append(f"README.md:{n}: nothing reads {var}")
    assert problems == []


def toml_keys() -> list[tuple[int, str]]:
    """Names the README gives as settings: "`a` / `b` in TOML", the resource-budget table,
    the Security section's list of settings."""
    found = []
    for n, line in LINES:
        for m in re.finditer(r"((?:`[a-z_]+`(?: / | or | and |, )?)+) in TOML", line):
            found += [(n, k) for k in re.findall(r"`([a-z_]+)`", m.group(1))]
        found += [(n, k) for k in re.findall(r"`([a-z][a-z0-9_]*)` \[", line)]
    text = README.read_text(encoding="utf-8")
    start = text.index("**Settings** (flags, `SEGMENTSTORE_*` variables or TOML")
    paragraph = text[start : text.index("\n\n", start)]
    base = text.count("\n", 0, start) + 1
    for m in re.finditer(r"`([a-z][a-z0-9_]*)`", paragraph):
        if m.group(1) in ("on", "off"):  # values
            continue
        found.append((base + paragraph.count("\n", 0, m.start()), m.group(1)))
    return found


def test_every_toml_key_is_a_setting(tmp_path: Path) -> None:
    from segmentstore.config import load_config

    found = toml_keys()
    assert len(found) >= 20, found
    problems = [f"README.md:{n}: {k} is not a setting" for n, k in found if k not in SETTINGS]
    assert problems == []
    # and the loader takes them from a file, under [segmentstore] as the README says
    toml = tmp_path / "s.toml"
    toml.write_text(
        "[segmentstore]\n"
        + "".join(
            f"{k} = {SETTINGS[k]!r}\n"
            for _, k in found
            if isinstance(SETTINGS[k], int | float) and not isinstance(SETTINGS[k], bool)
        )
    )
    assert load_config({}, {}, toml) == ServerConfig()


@pytest.mark.parametrize("flag", ["--endpoint", "--timeout", "--controller", "--json", "-q"])
def test_global_options_stand_after_subcommands_too(flag: str) -> None:
    """The README: these options may stand before the subcommand or after it."""
    parser = cli._parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    segment = sub.choices["segment"]
    inner = next(a for a in segment._actions if isinstance(a, argparse._SubParsersAction))
    assert flag in inner.choices["info"]._option_string_actions


def resolve(dotted: str) -> bool:
    """Whether ``a.b.c`` names a module or an attribute reachable from one."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for name in parts[cut:]:
                obj = getattr(obj, name)
        except AttributeError:
            return False
        return True
    return False


def test_named_sdk_paths_exist() -> None:
    """Every `segmentstore_client.x.y` (or `segmentstore.x.y`) the text names can be
    imported or reached: a renamed module or class shows here."""
    problems = []
    for n, line in LINES:
        for m in re.finditer(r"`((?:segmentstore_client|segmentstore)(?:\.\w+)+)", line):
            if not resolve(m.group(1)):
                problems.append(f"README.md:{n}: {m.group(1)} does not exist")
    assert problems == []


def test_named_extras_exist() -> None:
    """Every `segmentstore[extra]` the text tells a user to install is an extra of
    pyproject.toml."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        extras = set(tomllib.load(f)["project"]["optional-dependencies"])
    named = [(n, m) for n, line in LINES for m in re.findall(r"segmentstore\[(\w+)\]", line)]
    assert len(named) >= 5, named
    assert [f"README.md:{n}: {e}" for n, e in named if e not in extras] == []


def test_exit_code_table_is_the_commands_codes() -> None:
    """The Command line section's table of exit codes lists exactly the codes of
    ``segmentstore.commands._cli.Exit``."""
    from segmentstore.commands._cli import Exit

    text = README.read_text(encoding="utf-8")
    start = text.index("| Code | Meaning | Code | Meaning |")
    table = text[start : text.index("\n\n", start)]
    stated = {int(c) for c in re.findall(r"\|\s*(\d+)\s*\|", table)}
    codes = {v for k, v in vars(Exit).items() if k.isupper() and isinstance(v, int)}
    assert stated == codes
