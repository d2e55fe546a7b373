"""Pi 1.6 files in and out: what Strand exports comes back entry for entry, and Pi 1.6.0's
own code opens it and builds the contexts Strand builds.

Pi 1.6.0 runs on the Node its fixtures pin (`make pi16-deps`); without them these tests
skip, saying so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from projections.context import UNSET
from projections.tree import project_tree
from sessions_app import selectors, store
from sessions_app.models import Session
from sessions_app.services import pi_io
from tests.pi16 import PI16, pi16_opens

ROOT = Path(__file__).resolve().parents[2]
PI = ROOT / "tests" / "fixtures" / "pi"
PI16_CASES = sorted(p.name.removesuffix(".jsonl") for p in (PI16 / "cases").glob("*.jsonl"))
# Pi's context walk never returns on the self-parented entry of `orphans`, so Pi cannot be
# asked about that file; every other 0.73.1 case is.
OLD_CASES = sorted(
    p.name.removesuffix(".jsonl")
    for p in (PI / "cases").glob("*.jsonl")
    if ".migrated" not in p.name and p.name != "orphans.jsonl"
)


def import_file(path: Path, owner: Any) -> Session:
    with path.open("rb") as source:
        return pi_io.pi_import(source=source, owner=owner, name=path.stem).session


def export_text(session: Session) -> str:
    return "".join(pi_io.pi_export_lines(session))


@pytest.mark.django_db
@pytest.mark.parametrize("name", PI16_CASES)
def test_a_pi16_file_imported_and_exported_comes_back_entry_for_entry(name, alice):
    original = (PI16 / "cases" / f"{name}.jsonl").read_text("utf-8")
    session = import_file(PI16 / "cases" / f"{name}.jsonl", alice)
    exported = export_text(session)
    assert [json.loads(line) for line in exported.splitlines()] == [
        json.loads(line) for line in original.splitlines()
    ]
    # Entry for entry and value for value; not byte for byte: the store keeps each entry as
    # a JSON value (Postgres jsonb), which does not keep the order of an object's keys.


def check_pi16_reads_the_export(session: Session, tmp_path: Path) -> None:
    path = tmp_path / "export.jsonl"
    path.write_text(export_text(session), encoding="utf-8")
    pi = pi16_opens(path)
    entries = store.entries_of(session.id)
    assert pi["rewritten"] is False
    assert pi["entries"] == len(entries)
    assert pi["leafId"] == session.leaf_entry_id
    tree = project_tree(entries, session.leaf_entry_id)
    assert pi["roots"] == list(tree.roots)
    assert len(pi["contexts"]) == len(entries) + 1
    for record in pi["contexts"]:
        leaf = record.get("leafId", UNSET)
        ours = json.loads(json.dumps(selectors.session_context(session, leaf).to_pi()))
        assert ours == record["context"], f"leaf {record.get('leafId', '(unset)')}"


@pytest.mark.django_db
@pytest.mark.parametrize("name", PI16_CASES)
def test_pi16_opens_the_export_of_a_pi16_file_and_builds_strands_contexts(name, alice, tmp_path):
    session = import_file(PI16 / "cases" / f"{name}.jsonl", alice)
    check_pi16_reads_the_export(session, tmp_path)


@pytest.mark.django_db
@pytest.mark.parametrize("name", OLD_CASES)
def test_pi16_opens_the_export_of_a_0731_file_and_builds_strands_contexts(name, alice, tmp_path):
    session = import_file(PI / "cases" / f"{name}.jsonl", alice)
    check_pi16_reads_the_export(session, tmp_path)


def usage_of(entry: dict[str, Any]) -> dict[str, Any] | None:
    """Where Pi 1.6 keeps usage that counts in a session's totals (docs/session-format.md)."""
    if entry["type"] in ("usage", "compaction", "branch_summary"):
        return entry.get("usage")
    message = entry.get("message") or {}
    if entry["type"] == "message" and message.get("role") in ("assistant", "toolResult"):
        return message.get("usage")
    return None


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["usage_entries", "system_messages"])
def test_usage_outside_the_conversation_counts_in_the_session_s_tokens(name, alice):
    path = PI16 / "cases" / f"{name}.jsonl"
    entries = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    usages = [u for e in entries if (u := usage_of(e)) is not None]
    outside = [e for e in entries if e["type"] != "message" and usage_of(e) is not None]
    assert name != "usage_entries" or len(outside) >= 4  # usage entries and summaries
    session = import_file(path, alice)
    assert session.token_count == sum(u["totalTokens"] for u in usages)


@pytest.mark.django_db
def test_branch_totals_count_usage_entries_and_summaries(alice):
    from projections.compare import branch_totals

    path = PI16 / "cases" / "usage_entries.jsonl"
    ids = json.loads((PI16 / "cases" / "usage_entries.meta.json").read_text())["notes"]
    session = import_file(path, alice)
    branch = store.path_to_root(session.id, ids["a4"])
    expected = sum(u["totalTokens"] for e in branch if (u := usage_of(dict(e.data))) is not None)
    totals = branch_totals(branch, [])
    assert totals.tokens == expected
    assert ids["warm2"] in {e.id for e in branch} and totals.cost > 0
