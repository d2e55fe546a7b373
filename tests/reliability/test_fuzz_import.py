"""Pi import under hostile files: every case imports whole or is refused with a clean error,
and a refused file leaves the database exactly as it was."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection
from hypothesis import given, settings
from hypothesis import strategies as st

from sessions_app.selectors.verify import verify_session
from sessions_app.services import pi_io

ROOT = Path(__file__).resolve().parents[2]
BASE = (ROOT / "tests" / "fixtures" / "pi" / "cases" / "branching.jsonl").read_bytes()
BASE_LINES = BASE.splitlines(keepends=True)
ENTRIES = [json.loads(line) for line in BASE_LINES[1:] if line.strip()]


def database_state() -> tuple:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT (SELECT count(*) FROM sessions_app_session), "
            "(SELECT count(*) FROM sessions_app_event), (SELECT count(*) FROM sessions_app_entry), "
            "(SELECT coalesce(max(seq), -1) FROM sessions_app_event)"
        )
        return tuple(cur.fetchone())


def try_import(content: bytes, owner) -> bool:
    before = database_state()
    try:
        result = pi_io.pi_import(source=io.BytesIO(content), owner=owner)
    except pi_io.PiImportError as exc:
        assert str(exc), "an error says what is wrong"
        assert database_state() == before
        return False
    assert verify_session(result.session) is None
    return True


def line(value: object) -> bytes:
    return json.dumps(value).encode() + b"\n"


mutations = st.one_of(
    # truncate anywhere
    st.integers(0, len(BASE)).map(lambda n: BASE[:n]),
    # flip a byte into invalid UTF-8 or garbage
    st.tuples(
        st.integers(0, len(BASE) - 1), st.sampled_from([b"\xff", b"\xc3", b"{", b"\n", b"\x00"])
    ).map(lambda t: BASE[: t[0]] + t[1] + BASE[t[0] + 1 :]),
    # drop or duplicate a line
    st.integers(0, len(BASE_LINES) - 1).map(
        lambda i: b"".join(BASE_LINES[:i] + BASE_LINES[i + 1 :])
    ),
    st.integers(1, len(BASE_LINES) - 1).map(
        lambda i: b"".join(BASE_LINES[: i + 1] + BASE_LINES[i:])
    ),
    # wrong types in an entry's fields
    st.tuples(
        st.integers(0, len(ENTRIES) - 1),
        st.sampled_from(["id", "parentId", "type", "timestamp", "message"]),
        st.one_of(
            st.none(),
            st.integers(),
            st.booleans(),
            st.lists(st.integers(), max_size=2),
            st.text(max_size=5),
        ),
    ).map(
        lambda t: (
            BASE_LINES[0]
            + b"".join(line({**e, t[1]: t[2]} if i == t[0] else e) for i, e in enumerate(ENTRIES))
        )
    ),
)


@pytest.mark.django_db
def test_mutated_files_import_whole_or_leave_nothing(alice):
    outcomes: list[bool] = []

    @settings(max_examples=120, deadline=None)
    @given(content=mutations)
    def imports_whole_or_leaves_nothing(content: bytes) -> None:
        outcomes.append(try_import(content, alice))

    imports_whole_or_leaves_nothing()
    # The fuzzing is only worth something if it made files that import and files that are
    # refused; counted here, on this run's own examples, so no other test needs to run first.
    assert any(outcomes) and not all(outcomes), outcomes.count(True)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "entries, imports",
    [
        # a parent cycle: a → b → a (and nothing else): refused, as every cycle is
        (
            [
                {"type": "custom", "customType": "x", "id": "a", "parentId": "b", "timestamp": "t"},
                {"type": "custom", "customType": "x", "id": "b", "parentId": "a", "timestamp": "t"},
            ],
            False,
        ),
        # duplicate ids
        (
            [
                {
                    "type": "custom",
                    "customType": "x",
                    "id": "a",
                    "parentId": None,
                    "timestamp": "t",
                },
                {
                    "type": "custom",
                    "customType": "x",
                    "id": "a",
                    "parentId": None,
                    "timestamp": "t",
                },
            ],
            False,
        ),
        # a parent id that names an entry of another session: just missing here (an orphan)
        (
            [
                {
                    "type": "custom",
                    "customType": "x",
                    "id": "c",
                    "parentId": "ce267f30",
                    "timestamp": "t",
                }
            ],
            True,
        ),
        # an unknown entry type
        ([{"type": "nonsense", "id": "a", "parentId": None, "timestamp": "t"}], False),
        # a message entry whose message is not an object
        (
            [{"type": "message", "id": "a", "parentId": None, "timestamp": "t", "message": "hi"}],
            False,
        ),
    ],
)
def test_structural_oddities(alice, entries, imports):
    pi_io.pi_import(source=io.BytesIO(BASE), owner=alice)  # another session holding ce267f30
    header = line({"type": "session", "version": 3, "id": "s", "timestamp": "t", "cwd": "/"})
    assert try_import(header + b"".join(line(e) for e in entries), alice) is imports


@pytest.mark.django_db
def test_a_huge_line_is_refused_cleanly(alice):
    header = line({"type": "session", "version": 3, "id": "s", "timestamp": "t", "cwd": "/"})
    huge = {
        "type": "message",
        "id": "a",
        "parentId": None,
        "timestamp": "t",
        "message": {"role": "user", "content": "x" * (2 * 1024 * 1024)},
    }
    assert try_import(header + line(huge), alice) is False


def test_a_bad_file_gives_one_line_and_status_1_on_the_command_line(tmp_path):
    bad = tmp_path / "cut.jsonl"
    bad.write_bytes(
        b'{"type":"session","id":"s","version":3}\n{"type":"message","id":"a","parentId":null,"message":{"role":"user","content":"\xff"}}\n'
    )
    result = subprocess.run(
        [sys.executable, "manage.py", "import_pi", str(bad)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1
    assert "UTF-8" in result.stderr
