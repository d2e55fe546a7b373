"""Pi's own output as test data.

`tests/fixtures/pi/cases/` holds session files with what Pi 0.73.1 made of them, and
`tests/fixtures/pi/v1.6/cases/` the same for Pi 1.6.0 (whose context records also carry
`llm`, Pi's `convertToLlm` of the context's messages):

- `<name>.jsonl` — the session file as Pi (or a test) wrote it;
- `<name>.contexts.json` — a JSON array of `{"leafId": ..., "context": ...}`, the result of
  Pi's `buildSessionContext` for that leaf (no "leafId" key: the leaf was left undefined);
- `<name>.migrated.jsonl` — for a version 1 file, the file after Pi's own migration. Its
  ids are Pi's random ones, so its `leafId`s name entries of the migrated file;
- `<name>.meta.json` — notes on the case, among them the physical numbers of the lines Pi
  skipped (`skippedLines`) and of the lines it kept without a type (`linesKeptWithoutType`).

A test that asks for the `pi_case` fixture runs once per case found, of both versions (the
1.6 ones named `pi16-<name>`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

PI_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "pi"
CASES_DIR = PI_FIXTURES / "cases"
PI16_CASES_DIR = PI_FIXTURES / "v1.6" / "cases"


@dataclass(frozen=True)
class PiCase:
    name: str
    path: Path
    pi_version: str = "0.73.1"

    @property
    def id(self) -> str:
        return self.name if self.pi_version == "0.73.1" else f"pi16-{self.name}"

    @property
    def contexts_path(self) -> Path:
        return self.path.with_name(f"{self.name}.contexts.json")

    @property
    def migrated_path(self) -> Path | None:
        migrated = self.path.with_name(f"{self.name}.migrated.jsonl")
        return migrated if migrated.exists() else None

    def meta(self) -> dict[str, Any]:
        """What the generator noted about the file (`<name>.meta.json`), if anything."""
        path = self.path.with_name(f"{self.name}.meta.json")
        if not path.exists():
            return {}
        loaded: dict[str, Any] = json.loads(path.read_text("utf-8"))
        return loaded

    def contexts(self) -> list[dict[str, Any]]:
        if not self.contexts_path.exists():
            return []
        loaded: list[dict[str, Any]] = json.loads(self.contexts_path.read_text("utf-8"))
        return loaded


def find_pi_cases() -> list[PiCase]:
    cases: list[PiCase] = []
    for directory, version in ((CASES_DIR, "0.73.1"), (PI16_CASES_DIR, "1.6.0")):
        if not directory.is_dir():
            continue
        sources = sorted(
            path for path in directory.glob("*.jsonl") if not path.name.endswith(".migrated.jsonl")
        )
        cases += [PiCase(path.name.removesuffix(".jsonl"), path, version) for path in sources]
    return cases


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "pi_case" in metafunc.fixturenames:
        cases = find_pi_cases()
        metafunc.parametrize("pi_case", cases, ids=[case.id for case in cases])
