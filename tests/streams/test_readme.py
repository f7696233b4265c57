"""The README's stream example runs against a real server and controller."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from controller.conftest import Ctl, controller_uri

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_stream_example_runs(ctl: Ctl) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    # The complete stream programs (other sections show fragments that name the controller).
    examples = [b for b in blocks if "localhost:9090" in b and "stream_writer(" in b]
    assert len(examples) >= 2  # async and blocking
    for code in examples:
        code = code.replace("tcp://localhost:12345", ctl.server.endpoint)
        code = code.replace("tcp://localhost:9090", controller_uri(ctl.server))
        proc = subprocess.run(
            [sys.executable, "-W", "error::RuntimeWarning", "-c", code],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "segmentstore.streamcut/1" in proc.stdout
