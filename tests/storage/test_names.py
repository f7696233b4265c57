"""Every name the wire can carry survives the log, the checkpoint, recovery and routing.

Issue 13 item 1: a name with a lone surrogate (bytes ``6f 6b 2f ed a0 80``, legal modified
UTF-8) was created and acknowledged, and then recovery (strict decoding of the CREATE record)
and the checkpoint (strict encoding) both failed, which bricked the data directory. The rule
is ``names.encode_name`` / ``decode_name`` everywhere; these tests restart through both paths:
a kill -9 of a real process (recovery from the log) and a clean close (the checkpoint).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from segmentstore_client.protocol.names import MAX_NAME_BYTES, decode_name, encode_name

from segmentstore.storage import SegmentStore
from segmentstore.storage.store import container_of

from .conftest import small_config

ODD_NAMES = [
    decode_name(bytes.fromhex("6f6b2feda080")),  # "ok/" + lone high surrogate (the issue's)
    "low/\udc00",  # lone low surrogate
    "pair-reversed/\udfff\ud800",
    "split-pair/\ud83d\ude00",  # a pair spelled as two code points (CESU-style on the wire)
    "nul\x00inside",  # the store keeps what it is given; the server refuses control chars
    "/",
    "..",
    "../../etc/passwd",
    "a/./b//c/",
    "emoji/\U0001f600",
    "x" * (MAX_NAME_BYTES - 1),
    "é" * (MAX_NAME_BYTES // 2 - 1),
]


def _payload(i: int) -> bytes:
    return f"event {i};".encode() * (i + 1)


async def _check(data_dir: Path, containers: int) -> None:
    async with await SegmentStore.open(small_config(data_dir, container_count=containers)) as s:
        assert sorted(s.segment_names()) == sorted(ODD_NAMES)
        for i, name in enumerate(ODD_NAMES):
            assert s.exists(name)
            r = await s.read(name, 0, 1 << 20)
            assert bytes(r.data) == _payload(i), name[:40]
        # The directory stays usable: more appends, another restart.
        await s.append(ODD_NAMES[0], b"more")
    async with await SegmentStore.open(small_config(data_dir, container_count=containers)) as s:
        assert s.info(ODD_NAMES[0]).length == len(_payload(0)) + 4


@pytest.mark.parametrize("containers", [1, 3])
async def test_odd_names_survive_close_and_checkpoint(tmp_path: Path, containers: int) -> None:
    cfg = small_config(tmp_path, container_count=containers)
    async with await SegmentStore.open(cfg) as s:
        for i, name in enumerate(ODD_NAMES):
            await s.create_segment(name)
            await s.append(name, _payload(i))
    # close() wrote a checkpoint holding every name; recovery reads them back from it.
    assert list(tmp_path.glob("container-*/checkpoint-*.ckp"))
    await _check(tmp_path, containers)


_CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from segmentstore.storage import SegmentStore
    from tests.storage.conftest import small_config
    from tests.storage.test_names import ODD_NAMES, _payload

    async def main() -> None:
        cfg = small_config(Path(sys.argv[1]), container_count=int(sys.argv[2]))
        s = await SegmentStore.open(cfg)
        for i, name in enumerate(ODD_NAMES):
            await s.create_segment(name)
            await s.append(name, _payload(i))
        print("acked", flush=True)
        await asyncio.sleep(60)

    asyncio.run(main())
    """
)


@pytest.mark.parametrize("containers", [1, 3])
async def test_odd_names_survive_kill_9(tmp_path: Path, containers: int) -> None:
    """Acknowledged creates and appends, then SIGKILL: recovery replays CREATE records."""
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(tmp_path), str(containers)],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "acked", proc.stderr.read() if proc.stderr else ""
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    assert not list(tmp_path.glob("container-*/checkpoint-*.ckp"))  # only the log has them
    await _check(tmp_path, containers)


def test_names_route_by_their_stored_bytes() -> None:
    # Routing hashes the same bytes the log stores, so it never raises for a legal name.
    for name in ODD_NAMES:
        assert decode_name(encode_name(name)) == name
        assert 0 <= container_of(name, 7) < 7
        assert container_of(name + "#transaction.00ff", 7) == container_of(name, 7)
