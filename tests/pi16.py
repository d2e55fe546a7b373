"""Pi 1.6.0 itself, from npm (tests/fixtures/pi/v1.6, `make pi16-deps`), on the Node it needs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

PI16 = Path(__file__).resolve().parent / "fixtures" / "pi" / "v1.6"
NODE = PI16 / "node_modules" / "node" / "bin" / "node"


def pi16_opens(path: Path) -> dict[str, Any]:
    """What Pi 1.6.0 makes of the file (check_export.mjs): its leaf, roots and contexts."""
    if not NODE.exists() or not (PI16 / "node_modules/@earendil-works/pi-coding-agent").exists():
        pytest.skip(
            "Pi 1.6.0 and its Node are not installed in tests/fixtures/pi/v1.6 (make pi16-deps)"
        )
    out = subprocess.run(
        [str(NODE), str(PI16 / "check_export.mjs"), str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    loaded: dict[str, Any] = json.loads(out.stdout)
    return loaded
