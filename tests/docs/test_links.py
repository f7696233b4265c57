"""Every relative link of the README and of ``docs/*.md`` resolves: the file exists and,
when the link names an anchor (``#...``), the target file has a heading with that anchor
(GitHub's rule: lower case, punctuation other than ``-`` and ``_`` dropped, spaces to
``-``; a repeated heading gets ``-1``, ``-2``, ...). Headings inside fenced code blocks
do not count. External links (``http://``, ``https://``, ``mailto:``) are not fetched.
No server runs: well under a second."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (.+?)\s*#*\s*$")


def _outside_fences(text: str) -> list[tuple[int, str]]:
    """(line number, line) of the lines outside fenced code blocks."""
    lines, fenced = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((n, line))
    return lines


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown page."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for _, line in _outside_fences(text):
        m = HEADING.match(line)
        if not m:
            continue
        title = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1))
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return out


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    text = page.read_text(encoding="utf-8")
    problems = []
    for n, line in _outside_fences(text):
        # Inline code spans are not links.
        for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(root)}:{n}: {target}"
            if not dest.exists():
                problems.append(f"{where}: no file {dest.relative_to(root)}")
            elif anchor and anchor not in anchors(dest.read_text(encoding="utf-8")):
                problems.append(f"{where}: no heading with anchor #{anchor}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_resolve(page: Path) -> None:
    assert broken_links(page) == []


def test_the_checker_sees_broken_links(tmp_path: Path) -> None:
    """The rule itself: a missing file and a missing anchor are reported, a good link and
    a link inside a code block are not."""
    (tmp_path / "other.md").write_text("# Title\n\n## A `code` heading, too\n")
    page = tmp_path / "page.md"
    page.write_text(
        "## Here\n\n[ok](other.md#a-code-heading-too) [self](#here) [gone](missing.md)\n"
        "[bad anchor](other.md#nope)\n\n```\n[inside](nowhere.md)\n```\n"
    )
    assert broken_links(page, tmp_path) == [
        "page.md:3: missing.md: no file missing.md",
        "page.md:4: other.md#nope: no heading with anchor #nope",
    ]


def test_the_readme_links_to_every_doc() -> None:
    """Each page under docs/ is reachable from the README."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    unlinked = [p.name for p in PAGES[1:] if f"](docs/{p.name}" not in readme]
    assert unlinked == []
