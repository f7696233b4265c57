"""The README's fenced code blocks, with the section each is in and its line number.

Contract: ``blocks(text)`` returns every fenced block (```` ``` ```` fences, any info string) in
document order as a ``Block``: its language (the info string, "" when none), its body, the
1-based line number of its opening fence, the titles of the level-2 and level-3 headings
above it (headings inside code blocks do not count) and ``note``: the text of an HTML
comment (``<!-- ... -->``) on the last non-blank line before the fence, else "". Two
notes mean something to ``tests/docs/test_readme_examples.py``: ``no-test: reason``
leaves the block out (the one way to do so by hand; the test fails on a block that no
rule runs or marks) and ``test-wrap: async`` runs a fragment inside a coroutine with a
connected ``client``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NOTE = re.compile(r"<!--\s*(.+?)\s*-->")
HEADING = re.compile(r"^(#{2,3}) (.+?)\s*$")


@dataclass(frozen=True, slots=True)
class Block:
    lang: str
    body: str
    line: int  # 1-based line of the opening fence
    section: str  # the level-2 heading above it
    subsection: str  # the level-3 heading above it within that section, "" when none
    note: str

    @property
    def no_test(self) -> str | None:
        """The reason of a ``no-test:`` note, else None."""
        m = re.fullmatch(r"no-test:\s*(.+)", self.note)
        return m.group(1) if m else None

    @property
    def wrap(self) -> str | None:
        """The kind of a ``test-wrap:`` note, else None."""
        m = re.fullmatch(r"test-wrap:\s*(\S+)", self.note)
        return m.group(1) if m else None

    def where(self) -> str:
        place = self.section + (f" / {self.subsection}" if self.subsection else "")
        return f"README.md:{self.line} ({place})"


def blocks(text: str) -> list[Block]:
    found: list[Block] = []
    section = subsection = ""
    lines = text.splitlines()
    last_text = ""  # the last non-blank line outside blocks
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            start = i
            lang = line[3:].strip()
            i += 1
            body: list[str] = []
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            note = NOTE.search(last_text)
            found.append(
                Block(
                    lang,
                    "\n".join(body) + "\n",
                    start + 1,
                    section,
                    subsection,
                    note.group(1) if note else "",
                )
            )
            last_text = ""
            i += 1
            continue
        heading = HEADING.match(line)
        if heading:
            if len(heading.group(1)) == 2:
                section, subsection = heading.group(2), ""
            else:
                subsection = heading.group(2)
        if line.strip():
            last_text = line
        i += 1
    return found
