"""`projections` is pure Python: importing it must not pull in Django or the rest of Strand."""

from __future__ import annotations

import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import projections

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ("django", "sessions_app", "runtime", "config", "ninja", "channels")

# Imports every module of the package in a fresh interpreter, then reports which forbidden
# top-level packages ended up loaded.
PROBE = """
import importlib, json, pkgutil, sys
import projections
names = sorted(m.name for m in pkgutil.walk_packages(projections.__path__, "projections."))
for name in names:
    importlib.import_module(name)
loaded = sorted({m.split(".")[0] for m in sys.modules} & set(json.loads(sys.argv[1])))
print(json.dumps({"modules": names, "forbidden": loaded}))
"""


def test_projections_import_nothing_of_django_or_the_app() -> None:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    result = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(FORBIDDEN)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    report = json.loads(result.stdout)
    expected = {m.name for m in pkgutil.walk_packages(projections.__path__, "projections.")}
    assert set(report["modules"]) == expected
    assert "projections.context" in expected
    assert "projections.pi_file" in expected
    assert report["forbidden"] == []
