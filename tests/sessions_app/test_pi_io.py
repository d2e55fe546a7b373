"""Pi files through the database: import, the context Pi would build, export, verify."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from projections.context import UNSET
from projections.tree import project_tree
from sessions_app import selectors, services, store
from sessions_app.models import Entry, Event, Session
from sessions_app.selectors.verify import verify_session
from sessions_app.services import pi_io

ROOT = Path(__file__).resolve().parents[2]
PI = ROOT / "tests" / "fixtures" / "pi"
CASES = PI / "cases"
# Pi 0.73.1's cases ("cases/NAME") and Pi 1.6.0's ("v1.6/cases/NAME"), relative to PI.
CASE_NAMES = sorted(
    str(p.relative_to(PI)).removesuffix(".jsonl")
    for directory in (CASES, PI / "v1.6" / "cases")
    for p in directory.glob("*.jsonl")
    if ".migrated" not in p.name
)


def import_file(path: Path, owner, **kwargs) -> pi_io.ImportResult:
    """Import a fixture, without the lines on a parent cycle that its case lists (Pi loops
    forever on those and Strand refuses the file: see
    `test_a_case_with_a_parent_cycle_is_refused_at_its_line`)."""
    looping = (
        cyclic_ids(str(path.relative_to(PI)).removesuffix(".jsonl"))
        if path.is_relative_to(PI)
        else set()
    )
    lines = path.read_bytes().splitlines(keepends=True)
    kept = [line for line in lines if not _names_any(line, looping)]
    return pi_io.pi_import(source=io.BytesIO(b"".join(kept)), owner=owner, name=path.stem, **kwargs)


def cyclic_ids(name: str) -> set[str]:
    """`name` as in CASE_NAMES ("cases/orphans"), or a bare name in Pi 0.73.1's cases."""
    meta = PI / f"{name}.meta.json"
    if not meta.exists():
        meta = CASES / f"{name}.meta.json"
    if not meta.exists():
        return set()
    omitted = json.loads(meta.read_text()).get("contextLeavesOmitted", [])
    return {o["leafId"] for o in omitted if "loops" in o.get("reason", "")}


def _names_any(line: bytes, ids: set[str]) -> bool:
    try:
        value = json.loads(line)
    except ValueError:
        return False
    return isinstance(value, dict) and value.get("id") in ids


def id_map(session: Session, name: str) -> dict[str, str]:
    """Pi's ids → ours. Equal except for v1 files, whose migration draws random ids; there
    the entries are matched by file order against Pi's own migration of the same file."""
    migrated = PI / f"{name}.migrated.jsonl"
    ours = [e.id for e in store.entries_of(session.id)]
    if not migrated.exists():
        return {i: i for i in ours}
    lines = [json.loads(line) for line in migrated.read_text().splitlines() if line.strip()]
    theirs = [entry["id"] for entry in lines[1:]]
    assert len(theirs) == len(ours)
    return dict(zip(theirs, ours, strict=True))


def translate(value: object, ids: dict[str, str]) -> object:
    text = json.dumps(value, sort_keys=True)
    for theirs, ours in ids.items():
        text = text.replace(f'"{theirs}"', f'"{ours}"')
    return json.loads(text)


@pytest.mark.django_db
@pytest.mark.parametrize("name", CASE_NAMES)
def test_imported_session_gives_pi_s_own_context_for_every_recorded_leaf(name, alice):
    session = import_file(PI / f"{name}.jsonl", alice).session
    ids = id_map(session, name)
    records = json.loads((PI / f"{name}.contexts.json").read_text())
    assert records
    for record in records:
        if "leafId" not in record:
            leaf = UNSET
        elif record["leafId"] is None:
            leaf = None
        else:
            leaf = ids.get(record["leafId"], record["leafId"])
        ours = selectors.session_context(session, leaf).to_pi()
        assert ours == translate(record["context"], ids), f"leaf {record.get('leafId', '(unset)')}"


@pytest.mark.django_db
@pytest.mark.parametrize("name", CASE_NAMES)
def test_imported_session_has_pi_s_leaf_and_tree(name, alice):
    session = import_file(PI / f"{name}.jsonl", alice).session
    ids = id_map(session, name)
    leaf = json.loads((PI / f"{name}.leaf.json").read_text())["leafId"]
    assert session.leaf_entry_id == ids.get(leaf, leaf)
    pi_tree = translate(json.loads((PI / f"{name}.tree.json").read_text()), ids)
    assert isinstance(pi_tree, list)
    # Pi lists a non-object JSON line as a nameless root; such lines carry no entry here.
    looping = cyclic_ids(name)
    expected = [node for node in pi_tree if node["id"] is not None and node["id"] not in looping]
    tree = project_tree(store.entries_of(session.id), session.leaf_entry_id)

    def shape(node) -> dict:
        return {"id": node.id, "children": [shape(tree.nodes[c]) for c in node.children]}

    assert [shape(tree.nodes[r]) for r in tree.roots] == expected


@pytest.mark.django_db
@pytest.mark.parametrize("name", CASE_NAMES)
def test_export_then_import_gives_the_same_entries(name, alice, tmp_path):
    first = import_file(PI / f"{name}.jsonl", alice).session
    exported = tmp_path / "out.jsonl"
    exported.write_text("".join(pi_io.pi_export_lines(first)), encoding="utf-8")
    header = json.loads(exported.read_text().splitlines()[0])
    assert header["type"] == "session" and header["version"] == 3
    second = import_file(exported, alice).session
    before = [(e.id, e.parent_id, dict(e.data)) for e in store.entries_of(first.id)]
    after = [(e.id, e.parent_id, dict(e.data)) for e in store.entries_of(second.id)]
    assert after == before
    assert second.leaf_entry_id == first.leaf_entry_id
    assert verify_session(first) is None and verify_session(second) is None


@pytest.mark.django_db
def test_a_case_with_a_parent_cycle_is_refused_at_its_line(alice):
    path = CASES / "orphans.jsonl"
    [selfish] = cyclic_ids("orphans")
    line = next(
        n for n, text in enumerate(path.read_bytes().splitlines(), 1) if _names_any(text, {selfish})
    )
    with path.open("rb") as source, pytest.raises(pi_io.PiImportError) as refused:
        pi_io.pi_import(source=source, owner=alice)
    assert str(refused.value).startswith(f"line {line}: entry {selfish!r} names itself")
    assert not Session.objects.filter(owner=alice).exists()


@pytest.mark.django_db
def test_lines_pi_skips_are_warned_with_line_numbers(alice):
    meta = json.loads((CASES / "malformed_lines.meta.json").read_text())
    result = import_file(CASES / "malformed_lines.jsonl", alice)
    not_json = {s["line"] for s in meta["skippedLines"] if s["reason"] != "blank"}
    assert not_json <= {w.line_no for w in result.warnings}


@pytest.mark.django_db
@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "missing session header"),
        (b"not json\n", "missing session header"),
        (b'{"type":"message","id":"a"}\n', 'must have type "session"'),
        (b'{"type":"session"}\n', "no string id"),
        (
            b'{"type":"session","id":"s","version":3}\n{"type":"message","id":"a","parentId":null,"timestamp":"t","message":{"role":"user","content":"\xff\xfe"}}\n',
            "UTF-8",
        ),
        (
            b'{"type":"session","id":"s","version":3}\n{"type":"message","id":"a","parentId":null,"message":{"role":"user"}}\n{"type":"message","id":"a","parentId":null,"message":{"role":"user"}}\n',
            "appears twice",
        ),
        (
            b'{"type":"session","id":"s","version":3}\n{"type":"mystery","id":"a","parentId":null}\n',
            "mystery",
        ),
    ],
)
def test_bad_files_are_refused_and_nothing_is_written(alice, content, message):
    before = (Session.objects.count(), Event.objects.count(), Entry.objects.count())
    with pytest.raises(pi_io.PiImportError, match=message):
        pi_io.pi_import(source=io.BytesIO(content), owner=alice)
    assert (Session.objects.count(), Event.objects.count(), Entry.objects.count()) == before


@pytest.mark.django_db
def test_strict_mode_turns_warnings_into_errors(alice):
    with pytest.raises(pi_io.PiImportError, match="line 6"):
        import_file(CASES / "malformed_lines.jsonl", alice, strict=True)
    assert Session.objects.count() == 0


@pytest.mark.django_db
def test_entries_keep_their_ids_parents_timestamps_and_fields(alice):
    session = import_file(CASES / "branching.jsonl", alice).session
    lines = [
        json.loads(x) for x in (CASES / "branching.jsonl").read_text().splitlines() if x.strip()
    ]
    ours = {e.id: dict(e.data) for e in store.entries_of(session.id)}
    for entry in lines[1:]:
        assert ours[entry["id"]] == entry


@pytest.mark.django_db
def test_forward_parent_references_are_written_after_their_parent(alice):
    content = b"\n".join(
        [
            b'{"type":"session","id":"s","version":3,"timestamp":"2026-01-01T00:00:00.000Z","cwd":"/x"}',
            b'{"type":"message","id":"b","parentId":"a","timestamp":"2026-01-01T00:00:02.000Z","message":{"role":"user","content":"b"}}',
            b'{"type":"message","id":"a","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":"a"}}',
            b'{"type":"message","id":"c","parentId":"zz","timestamp":"2026-01-01T00:00:03.000Z","message":{"role":"user","content":"c"}}',
        ]
    )
    session = pi_io.pi_import(source=io.BytesIO(content), owner=alice).session
    entries = {e.id: e for e in store.entries_of(session.id)}
    assert entries["b"].parent_id == "a" and entries["a"].seq < entries["b"].seq
    assert session.leaf_entry_id == "c"  # the last entry in file order, as Pi opens it
    assert [e.id for e in store.path_to_root(session.id, "c")] == ["c"]  # an orphan
    assert verify_session(session) is None


@pytest.mark.django_db
def test_import_command_prints_one_id_per_file_in_order(capsys):
    files = [CASES / "basic_linear.jsonl", CASES / "branching.jsonl"]
    call_command("import_pi", *map(str, files))
    out = capsys.readouterr()
    ids = out.out.split()
    assert len(ids) == 2
    titles = [Session.objects.get(id=i).title for i in ids]
    assert titles[0] == "basic_linear"
    assert Session.objects.get(id=ids[1]).owner.username == "local"


@pytest.mark.django_db
def test_import_command_refuses_a_missing_file_before_writing_anything():
    with pytest.raises(CommandError, match="no such file"):
        call_command("import_pi", str(CASES / "basic_linear.jsonl"), "/nonexistent.jsonl")
    assert Session.objects.count() == 0


@pytest.mark.django_db
def test_context_command_prints_pi_and_provider_formats(alice, capsys):
    session = import_file(CASES / "basic_linear.jsonl", alice).session
    call_command("context", str(session.id))
    pi = json.loads(capsys.readouterr().out)
    assert set(pi) == {"messages", "thinkingLevel", "model"}
    call_command("context", str(session.id), "--format", "provider")
    provider = json.loads(capsys.readouterr().out)
    assert {m["role"] for m in provider} <= {"user", "assistant", "toolResult"}
    call_command("context", str(session.id), "--leaf", "null")
    assert json.loads(capsys.readouterr().out) == {
        "messages": [],
        "thinkingLevel": "off",
        "model": None,
    }


@pytest.mark.django_db
def test_export_command_writes_a_file_pi_can_read(alice, tmp_path):
    session = import_file(CASES / "compactions.jsonl", alice).session
    target = tmp_path / "out.jsonl"
    call_command("export_pi", str(session.id), "-o", str(target))
    original = (CASES / "compactions.jsonl").read_text().splitlines()
    exported = target.read_text().splitlines()
    assert len(exported) == len([x for x in original if x.strip()])
    assert [json.loads(x) for x in exported[1:]] == [
        json.loads(x) for x in original[1:] if x.strip()
    ]


@pytest.mark.django_db
def test_verify_names_the_first_difference(alice, capsys):
    session = import_file(CASES / "basic_linear.jsonl", alice).session
    call_command("verify", str(session.id))
    assert "1 session(s) verified" in capsys.readouterr().out
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO sessions_app_entry (session_id, entry_id, parent_id, type, data, "
            "timestamp, seq, depth) VALUES (%s, 'bogus000', NULL, 'custom', '{}', '', 999, 0)",
            [str(session.id)],
        )
    with pytest.raises(
        CommandError, match="'bogus000' is in the entry table but no event added it"
    ):
        call_command("verify", str(session.id))


@pytest.mark.django_db
def test_verify_notices_a_wrong_leaf(alice):
    session = import_file(CASES / "basic_linear.jsonl", alice).session
    Session.objects.filter(id=session.id).update(leaf_entry_id=None)
    session.refresh_from_db()
    assert "current leaf" in (verify_session(session) or "")


def test_import_cli_reports_errors_in_one_line_with_status_1(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type":"message"}\n')
    result = subprocess.run(
        [sys.executable, "manage.py", "import_pi", str(bad)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
    assert 'must have type "session"' in result.stderr


@pytest.mark.django_db
def test_fork_of_an_imported_session_keeps_the_path_context(alice):
    session = import_file(CASES / "compactions.jsonl", alice).session
    leaf = session.leaf_entry_id
    assert leaf is not None
    fork = services.session_fork(session=session, entry_id=leaf, owner=alice)
    assert (
        selectors.session_context(fork).to_pi()["messages"]
        == selectors.session_context(session).to_pi()["messages"]
    )


@pytest.mark.django_db
def test_context_command_refuses_an_unknown_leaf(alice, capsys):
    session = import_file(CASES / "basic_linear.jsonl", alice).session
    with pytest.raises(CommandError, match="'nope' is not an entry"):
        call_command("context", str(session.id), "--leaf", "nope")
    assert capsys.readouterr().out == ""


@pytest.mark.django_db
def test_verify_reports_a_request_whose_header_is_not_a_header(alice):
    session = import_file(CASES / "basic_linear.jsonl", alice).session
    # seq 0 is `session/created`, not a `request/header`: the manifest cannot be rebuilt.
    store.append_events(
        session.id,
        session.last_seq,
        [
            store.NewEvent(
                "request/sent",
                {
                    "header_seq": 0,
                    "leaf_entry_id": session.leaf_entry_id,
                    "payload_sha256": "0" * 64,
                    "token_estimate": 1,
                },
            )
        ],
    )
    session.refresh_from_db()
    difference = verify_session(session) or ""
    assert f"request/sent at seq {session.last_seq}" in difference
    assert "cannot rebuild" in difference
    with pytest.raises(CommandError, match=f"session {session.id}: request/sent"):
        call_command("verify", str(session.id))


# --- errors name the entry's own line ---------------------------------------------------


def _line(entry_id: str, parent: str | None, **fields: object) -> bytes:
    entry = {"id": entry_id, "parentId": parent, "timestamp": "2026-11-21T09:00:00.000Z"}
    return json.dumps({**fields, **entry}).encode()


def _file(*lines: bytes) -> bytes:
    header = (
        b'{"type":"session","version":3,"id":"s","timestamp":"2026-11-21T09:00:00.000Z","cwd":"/x"}'
    )
    return b"\n".join([header, *lines]) + b"\n"


def _user(entry_id: str, parent: str | None) -> bytes:
    return _line(entry_id, parent, type="message", message={"role": "user", "content": "hi"})


def _refused(alice, content: bytes) -> str:
    before = (Session.objects.count(), Event.objects.count(), Entry.objects.count())
    with pytest.raises(pi_io.PiImportError) as caught:
        pi_io.pi_import(source=io.BytesIO(content), owner=alice)
    assert (Session.objects.count(), Event.objects.count(), Entry.objects.count()) == before
    message = str(caught.value)
    assert "\n" not in message
    return message


@pytest.mark.django_db
def test_a_bad_message_names_its_own_line_not_the_last_one(alice):
    # 30 lines, the bad one on line 4: the importer reads ahead, the message must not.
    lines = [_user("a0", None), _user("a1", "a0")]
    lines.append(_line("bad", "a1", type="message", message={"role": "oracle", "content": "?"}))
    lines += [_user(f"b{i}", "bad" if i == 0 else f"b{i - 1}") for i in range(26)]
    message = _refused(alice, _file(*lines))
    assert message.startswith("line 4: message entry 'bad': message role must be one of")
    assert "'oracle'" in message and "Value error" not in message


@pytest.mark.django_db
def test_a_bad_entry_after_blank_lines_names_its_physical_line(alice):
    bad = _line("e", "a", type="context_edit", targetId="a", replacement={"text": "no content"})
    message = _refused(alice, _file(_user("a", None), b"", b"   ", bad, _user("z", "e")))
    assert message.startswith("line 5: context_edit entry 'e': a context edit's replacement")


@pytest.mark.django_db
def test_a_bad_entry_waiting_for_its_parent_names_its_own_line(alice):
    # "c" names a parent that comes later, so it is written after it; its line is still 2.
    bad = _line("c", "p", type="usage", kind="cache_warm")  # no usage object
    message = _refused(alice, _file(bad, _user("x", None), _user("y", "x"), _user("p", "y")))
    assert message.startswith("line 2: usage entry 'c': a usage entry needs a usage object")


@pytest.mark.django_db
def test_an_unknown_entry_type_names_its_own_line(alice):
    lines = [_user("a", None), _line("m", "a", type="mystery"), _user("b", "m"), _user("c", "b")]
    message = _refused(alice, _file(*lines))
    assert message == "line 3: mystery entry 'm': no event adds Pi entries of type 'mystery'"


@pytest.mark.django_db
def test_a_system_message_with_bad_sections_is_refused_on_its_line(alice):
    system = {"role": "system", "content": "", "sections": {"a": 1}, "timestamp": 0}
    message = _refused(alice, _file(_line("s", None, type="message", message=system)))
    assert (
        message
        == "line 2: message entry 's': a system message's sections must map names to text or null"
    )


@pytest.mark.django_db
def test_an_entry_the_store_cannot_hold_names_its_own_line(alice, settings):
    settings.STRAND_MAX_EVENT_BYTES = 2000
    big = _line("big", "a", type="message", message={"role": "user", "content": "x" * 3000})
    nul = _line("nul", "a", type="message", message={"role": "user", "content": "a\u0000b"})
    lines = [_user("a", None), big, *(_user(f"z{i}", "a") for i in range(5))]
    message = _refused(alice, _file(*lines))
    assert (
        message.startswith("line 3: message entry 'big': ") and "over the limit of 2000" in message
    )
    message = _refused(alice, _file(_user("a", None), _user("b", "a"), nul, _user("c", "b")))
    assert message.startswith("line 4: message entry 'nul': ") and "NUL character" in message
