"""Reading, migrating and writing Pi session files."""

from __future__ import annotations

import json
import re
import tracemalloc
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from projections import pi_file
from projections.context import UNSET, build_session_context
from projections.pi_file import (
    PiFileError,
    PiWarning,
    export_lines,
    iter_pi_entries,
    parse_header,
)
from projections.records import EntryRecord

if TYPE_CHECKING:
    from tests.projections.conftest import PiCase

HEADER = {"type": "session", "version": 3, "id": "sess-1", "timestamp": "2026-01-01T00:00:00Z"}


def line(value: Any) -> str:
    return json.dumps(value)


def read(
    lines: Iterable[str] | Iterable[bytes] | Iterable[str | bytes], *, strict: bool = False
) -> tuple[list[dict[str, Any]], list[PiWarning]]:
    warnings: list[PiWarning] = []
    out = list(iter_pi_entries(lines, strict=strict, on_warning=warnings.append))
    return out, warnings


def message(entry_id: str, parent: str | None, text: str, role: str = "user") -> dict[str, Any]:
    return {
        "type": "message",
        "id": entry_id,
        "parentId": parent,
        "timestamp": "2026-01-01T00:00:01Z",
        "message": {"role": role, "content": text, "timestamp": 1},
    }


def records(entries: list[dict[str, Any]]) -> list[EntryRecord]:
    return [
        EntryRecord(
            id=e.get("id", ""),
            parent_id=e.get("parentId"),
            type=e["type"],
            timestamp=e.get("timestamp", ""),
            data=e,
            seq=i,
        )
        for i, e in enumerate(entries)
    ]


# --- the header ----------------------------------------------------------------------


def test_parse_header_returns_the_header_as_written() -> None:
    header = parse_header(line({"type": "session", "id": "x", "cwd": "/w"}))
    assert header == {"type": "session", "id": "x", "cwd": "/w"}


def test_parse_header_accepts_bytes() -> None:
    assert parse_header(line(HEADER).encode() + b"\n") == HEADER


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "blank"),
        ("not json", "not valid JSON"),
        ("[1, 2]", "not a JSON object"),
        (line({"type": "message", "id": "x"}), 'type "session"'),
        (line({"type": "session"}), "string id"),
        (line({"type": "session", "id": 5}), "string id"),
    ],
)
def test_parse_header_refuses_a_bad_header(text: str, reason: str) -> None:
    with pytest.raises(PiFileError, match=reason) as raised:
        parse_header(text, line_no=4)
    assert str(raised.value).startswith("line 4: ")
    assert raised.value.line_no == 4


@pytest.mark.parametrize(
    "lines",
    [
        [],
        ["", "   ", "\n"],
        [line(message("a", None, "x"))],
        [line({"type": "session", "version": 3})],
        [line(["session"])],
    ],
    ids=["empty", "blank", "no-header", "header-without-id", "array"],
)
def test_a_file_without_a_valid_header_is_an_error_not_an_empty_session(
    lines: list[str],
) -> None:
    with pytest.raises(PiFileError):
        read(lines)


def test_unreadable_version_is_an_error() -> None:
    with pytest.raises(PiFileError, match="line 1: .*version"):
        read([line({**HEADER, "version": "3"})])


def test_header_error_names_its_line() -> None:
    with pytest.raises(PiFileError, match=r"^line 3: "):
        read(["", "", line({"type": "message"})])


# --- reading version 3 ---------------------------------------------------------------


def test_v3_file_reads_header_then_entries_unchanged() -> None:
    entries = [message("a", None, "hi"), message("b", "a", "yo", role="assistant")]
    out, warnings = read([line(HEADER), *map(line, entries)])
    assert out == [HEADER, *entries]
    assert [list(e) for e in out[1:]] == [list(e) for e in entries]
    assert warnings == []


def test_blank_and_whitespace_lines_are_skipped_silently() -> None:
    out, warnings = read(
        ["", line(HEADER), "   ", "\u00a0\t", line(message("a", None, "x")), "", "\r"]
    )
    assert [e["type"] for e in out] == ["session", "message"]
    assert warnings == []


def test_byte_order_mark_and_crlf_are_accepted() -> None:
    data = ("\ufeff" + line(HEADER) + "\r\n" + line(message("a", None, "é")) + "\r\n").encode()
    out, warnings = read(data.splitlines(keepends=True))
    assert out[1]["message"]["content"] == "é"
    assert warnings == []


def test_trailing_whitespace_on_the_last_line_is_trimmed_as_pi_trims_the_file() -> None:
    out, warnings = read([line(HEADER), line(message("a", None, "x")) + "\u00a0"])
    assert len(out) == 2
    assert warnings == []


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ("{not json", "not valid JSON"),
        ('{"type": "message", "n": NaN}', "not valid JSON"),
        ('{"a": 1} {"b": 2}', "not valid JSON"),
        ("\u00a0" + line(message("zz", None, "x")), "not valid JSON"),
        ("42", "not a JSON object"),
        ("null", "not a JSON object"),
        (line({"parentId": None, "note": 1}), "no type and no id"),
        (line({"type": "", "id": 7}), "no type and no id"),
        (line({"type": "session", "id": "other"}), "second session header"),
    ],
)
def test_lines_pi_skips_are_skipped_with_a_warning(bad: str, reason: str) -> None:
    out, warnings = read(
        [line(HEADER), line(message("a", None, "x")), bad, line(message("b", "a", "y"))]
    )
    assert [e.get("id") for e in out[1:]] == ["a", "b"]
    assert len(warnings) == 1
    assert warnings[0].line_no == 3
    assert reason in warnings[0].message
    assert str(warnings[0]).startswith("line 3: ")


def test_strict_mode_turns_skipped_lines_into_errors() -> None:
    with pytest.raises(PiFileError, match=r"^line 3: not valid JSON"):
        read([line(HEADER), "", "{oops"], strict=True)


def test_strict_mode_refuses_an_untyped_entry() -> None:
    with pytest.raises(PiFileError, match="no type"):
        read([line(HEADER), line({"id": "x"})], strict=True)


def test_invalid_utf8_is_an_error_with_its_line_number_even_when_lenient() -> None:
    lines: list[str | bytes] = [line(HEADER).encode(), b"", b'{"type": "message", "x": "\xff"}']
    with pytest.raises(PiFileError, match=r"^line 3: invalid UTF-8"):
        read(lines)


def test_garbage_before_the_header_is_skipped_as_pi_skips_it() -> None:
    out, warnings = read(["garbage", line(HEADER), line(message("a", None, "x"))])
    assert out[0] == HEADER
    assert [w.line_no for w in warnings] == [1]


def test_garbage_before_the_header_is_an_error_in_strict_mode() -> None:
    with pytest.raises(PiFileError, match="^line 1: "):
        read(["garbage", line(HEADER)], strict=True)


def test_untyped_entry_stays_in_the_tree_as_a_custom_entry() -> None:
    # Pi keeps an object without a type in its tree: it never reaches a context, but its
    # children hang from it and it can be a leaf.
    untyped = {"id": "t", "parentId": "a", "timestamp": "t1", "note": "no type"}
    lines = [
        line(HEADER),
        line(message("a", None, "first")),
        line(untyped),
        line(message("b", "t", "second")),
    ]
    out, warnings = read(lines)
    assert out[2] == {
        "type": "custom",
        "id": "t",
        "parentId": "a",
        "timestamp": "t1",
        "customType": pi_file.UNTYPED_CUSTOM_TYPE,
        "data": untyped,
    }
    assert out[3]["parentId"] == "t"
    assert [w.line_no for w in warnings] == [3]
    assert "no type" in warnings[0].message
    entries = records(out[1:])
    assert [m["content"] for m in build_session_context(entries, "b").messages] == [
        "first",
        "second",
    ]
    assert [m["content"] for m in build_session_context(entries, "t").messages] == ["first"]


def test_newer_version_is_read_as_is_with_a_warning() -> None:
    header = {**HEADER, "version": 4}
    out, warnings = read([line(header), line(message("a", None, "x"))])
    assert out[0]["version"] == 4
    assert len(warnings) == 1


def test_reading_is_lazy() -> None:
    consumed = 0

    def lines() -> Iterator[str]:
        nonlocal consumed
        yield line(HEADER)
        for i in range(1000):
            consumed += 1
            yield line(message(f"e{i}", None, "x"))

    reader = iter_pi_entries(lines())
    next(reader), next(reader), next(reader)
    assert consumed < 5


def test_a_100k_entry_file_reads_in_bounded_memory() -> None:
    def lines() -> Iterator[bytes]:
        yield line({"type": "session", "id": "s", "timestamp": "t"}).encode()  # version 1
        text = line({"type": "message", "timestamp": "t", "message": {"role": "user"}})
        for _ in range(100_000):
            yield text.encode() + b"\n"

    tracemalloc.start()
    try:
        count = sum(1 for _ in iter_pi_entries(lines()))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 100_001
    # Only the v1 id list grows (a short string per entry); the entries themselves do not.
    assert peak < 30 * 1024 * 1024


# --- migration -----------------------------------------------------------------------


def test_v2_renames_hook_messages_and_sets_version_in_place() -> None:
    header = {"type": "session", "version": 2, "id": "s", "cwd": "/w"}
    hook_message = {"role": "hookMessage", "customType": "x", "content": "c", "display": True}
    hook = {
        "type": "message",
        "id": "h",
        "parentId": None,
        "timestamp": "t",
        "message": hook_message,
    }
    out, _ = read([line(header), line(hook), line(message("u", "h", "hi"))])
    assert list(out[0].items()) == [("type", "session"), ("version", 3), ("id", "s"), ("cwd", "/w")]
    assert out[1]["message"] == {**hook_message, "role": "custom"}
    assert list(out[1]["message"]) == list(hook_message)
    assert out[2] == message("u", "h", "hi")


def v1_lines() -> list[str]:
    return [
        line({"type": "session", "id": "s", "timestamp": "t0", "cwd": "/w"}),  # index 0
        line({"type": "message", "timestamp": "t1", "message": {"role": "user", "content": "a"}}),
        "not json (not in Pi's array, so not counted)",
        line({"type": "thinking_level_change", "timestamp": "t2", "thinkingLevel": "high"}),
        line({"type": "message", "timestamp": "t3", "message": {"role": "hookMessage"}}),
        line(
            {
                "type": "compaction",
                "timestamp": "t4",
                "summary": "S",
                "firstKeptEntryIndex": 2,
                "tokensBefore": 10,
            }
        ),
        line({"type": "message", "timestamp": "t5", "message": {"role": "user", "content": "b"}}),
    ]


def test_v1_gets_ids_a_parent_chain_and_first_kept_entry_id() -> None:
    out, warnings = read(v1_lines())
    header, entries = out[0], out[1:]
    assert list(header) == ["type", "id", "timestamp", "cwd", "version"]
    assert header["version"] == 3
    ids = [e["id"] for e in entries]
    assert all(re.fullmatch(r"[0-9a-f]{8}", i) for i in ids)
    assert len(set(ids)) == len(ids)
    assert [e["parentId"] for e in entries] == [None, *ids[:-1]]
    compaction = entries[3]
    # Index 2 is the thinking_level_change: the header is 0, the bad line is not counted.
    assert compaction["firstKeptEntryId"] == entries[1]["id"]
    assert list(compaction) == [
        "type",
        "timestamp",
        "summary",
        "tokensBefore",
        "id",
        "parentId",
        "firstKeptEntryId",
    ]
    assert entries[2]["message"]["role"] == "custom"
    assert list(entries[0]) == ["type", "timestamp", "message", "id", "parentId"]
    assert [w.line_no for w in warnings] == [3]


def compaction_v1(index: Any) -> str:
    return line(
        {"type": "compaction", "timestamp": "t", "summary": "S", "firstKeptEntryIndex": index}
    )


@pytest.mark.parametrize(
    ("index", "expected"),
    [
        (0, "absent"),  # the header
        (1, "first"),
        (1.0, "first"),
        (2, "self"),
        (3, "absent"),  # forward: Pi reads an id it has not given yet
        (-1, "absent"),
        (1.5, "absent"),
    ],
)
def test_v1_first_kept_entry_index_edge_cases(index: Any, expected: str) -> None:
    header = line({"type": "session", "id": "s"})
    first = line({"type": "message", "timestamp": "t", "message": {"role": "user"}})
    out, _ = read([header, first, compaction_v1(index)])
    compaction = out[2]
    assert "firstKeptEntryIndex" not in compaction
    wanted = {"first": out[1].get("id"), "self": compaction["id"], "absent": None}[expected]
    assert compaction.get("firstKeptEntryId") == wanted


def test_v1_first_kept_entry_index_that_is_not_a_number_is_left_alone() -> None:
    out, _ = read([line({"type": "session", "id": "s"}), compaction_v1("1")])
    assert out[1]["firstKeptEntryIndex"] == "1"
    assert "firstKeptEntryId" not in out[1]


def test_v1_untyped_entry_gets_an_id_and_stays_in_the_chain() -> None:
    lines = [
        line({"type": "session", "id": "s"}),
        line({"type": "message", "timestamp": "t", "message": {"role": "user", "content": "a"}}),
        line({"no": "type"}),
        compaction_v1(2),
    ]
    out, warnings = read(lines)
    untyped, compaction = out[2], out[3]
    assert untyped["type"] == "custom"
    assert untyped["data"] == {"no": "type"}
    assert untyped["parentId"] == out[1]["id"]
    assert compaction["parentId"] == untyped["id"]
    assert compaction["firstKeptEntryId"] == untyped["id"]
    assert [w.line_no for w in warnings] == [3]


def test_v1_index_of_a_line_that_is_not_an_object_names_the_next_entry() -> None:
    # Pi fails on such a file; we skip the value, and an index naming it keeps from the
    # entry after it, which is where Pi's window would start to emit anything.
    lines = [
        line({"type": "session", "id": "s"}),
        line({"type": "message", "timestamp": "t", "message": {"role": "user", "content": "a"}}),
        "42",
        line({"type": "message", "timestamp": "t", "message": {"role": "user", "content": "b"}}),
        compaction_v1(2),
    ]
    out, warnings = read(lines)
    assert out[3]["firstKeptEntryId"] == out[2]["id"]
    assert out[2]["parentId"] == out[1]["id"]
    assert [w.line_no for w in warnings] == [3]


def test_v1_ids_never_collide(monkeypatch: pytest.MonkeyPatch) -> None:
    given_out = iter(["aaaaaaaa", "aaaaaaaa", "aaaaaaaa", "bbbbbbbb"])
    monkeypatch.setattr(pi_file.secrets, "token_hex", lambda n: next(given_out))
    entry = line({"type": "message", "timestamp": "t", "message": {"role": "user"}})
    out, _ = read([line({"type": "session", "id": "s"}), entry, entry])
    assert [e["id"] for e in out[1:]] == ["aaaaaaaa", "bbbbbbbb"]


def test_v1_context_keeps_the_window_the_index_named() -> None:
    out, _ = read(v1_lines())
    context = build_session_context(records(out[1:])).to_pi()
    roles = [m["role"] for m in context["messages"]]
    # summary, then from the thinking change (no message) through the hook message, then b
    assert roles == ["compactionSummary", "custom", "user"]
    assert context["thinkingLevel"] == "high"


# --- writing -------------------------------------------------------------------------


def test_export_writes_a_compact_v3_file() -> None:
    header = {"type": "session", "version": 1, "id": "s", "cwd": "/w"}
    entries = [message("a", None, "héllo ☃")]
    text = "".join(export_lines(header, entries))
    first, second = text.splitlines()
    assert first == '{"type":"session","version":3,"id":"s","cwd":"/w"}'
    assert "héllo ☃" in second
    assert text.endswith("\n")
    assert header["version"] == 1  # the caller's header is not changed


def test_export_adds_a_missing_version_last() -> None:
    first = next(export_lines({"type": "session", "id": "s"}, []))
    assert first == '{"type":"session","id":"s","version":3}\n'


def test_export_escapes_lone_surrogates_as_javascript_does() -> None:
    lines = list(export_lines(HEADER, [{"type": "custom", "data": "\ud800"}]))
    assert lines[1] == '{"type":"custom","data":"\\ud800"}\n'
    lines[1].encode("utf-8")  # always encodable


def test_export_refuses_a_bad_header() -> None:
    with pytest.raises(PiFileError):
        list(export_lines({"type": "session"}, []))


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)


@st.composite
def random_entries(draw: st.DrawFn) -> list[dict[str, Any]]:
    count = draw(st.integers(0, 6))
    entries = []
    for i in range(count):
        extra = draw(st.dictionaries(st.text(max_size=5), json_values, max_size=3))
        entry = {
            **extra,
            "type": draw(st.sampled_from(["message", "custom", "label", "compaction"])),
            "id": f"e{i}",
            "parentId": f"e{i - 1}" if i else None,
        }
        entries.append(entry)
    return entries


@settings(max_examples=150, deadline=None)
@given(random_entries(), st.dictionaries(st.text(max_size=4), json_values, max_size=3))
def test_export_then_read_gives_back_the_same_entries(
    entries: list[dict[str, Any]], header_extra: dict[str, Any]
) -> None:
    header = {**header_extra, "type": "session", "version": 3, "id": "s"}
    data = "".join(export_lines(header, entries)).encode("utf-8")
    out, warnings = read(data.split(b"\n"))
    assert warnings == []
    assert out == [header, *entries]
    assert [list(e) for e in out] == [list(header), *(list(e) for e in entries)]


# --- Pi's own migration ------------------------------------------------------------------


def read_file(path: Path) -> list[dict[str, Any]]:
    with path.open("rb") as lines:
        return list(iter_pi_entries(lines))


def test_warnings_name_the_lines_pi_skips_or_keeps_without_a_type(pi_case: PiCase) -> None:
    meta = pi_case.meta()
    if "skippedLines" not in meta:
        pytest.skip("no notes on skipped lines")
    not_json = {s["line"] for s in meta["skippedLines"] if s["reason"] != "blank"}
    untyped = {s["line"] for s in meta.get("linesKeptWithoutType", [])}
    warnings: list[PiWarning] = []
    with pi_case.path.open("rb") as lines:
        for _ in iter_pi_entries(lines, on_warning=warnings.append):
            pass
    assert {w.line_no for w in warnings} == not_json | untyped


def test_migration_matches_pi(pi_case: PiCase) -> None:
    if pi_case.migrated_path is None:
        pytest.skip("no migrated file: the case is already version 3")
    ours = read_file(pi_case.path)
    theirs = read_file(pi_case.migrated_path)
    assert list(ours[0].items()) == list(theirs[0].items())
    assert len(ours) == len(theirs)
    # v1 ids are random: map ours onto Pi's by position, then compare field by field.
    id_map = {mine.get("id"): pi.get("id") for mine, pi in zip(ours[1:], theirs[1:], strict=True)}
    for mine, pi in zip(ours[1:], theirs[1:], strict=True):
        translated = {
            key: id_map.get(value, value)
            if key in ("id", "parentId", "firstKeptEntryId") and isinstance(value, str)
            else value
            for key, value in mine.items()
        }
        assert list(translated.items()) == list(pi.items())
    # And our own migration builds the contexts Pi built.
    reverse = {pi_id: our_id for our_id, pi_id in id_map.items()}
    entries = records(ours[1:])
    for expected in pi_case.contexts():
        leaf = expected.get("leafId", UNSET)
        if isinstance(leaf, str):
            leaf = reverse.get(leaf, leaf)
        built = json.loads(json.dumps(build_session_context(entries, leaf).to_pi()))
        assert built == expected["context"], f"leaf {leaf!r}"
