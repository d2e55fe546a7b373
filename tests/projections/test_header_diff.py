"""The diff of one `request/header` against the session's previous one."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from projections.header_diff import (
    DiffLine,
    HeaderDiff,
    ValueChange,
    diff_headers,
    header_changed,
    text_diff,
)

READ = {
    "name": "read_file",
    "description": "Read a file.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
}
WRITE = {
    "name": "write_file",
    "description": "Write a file.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
}
BASE: dict[str, Any] = {
    "reason": "initial",
    "provider": "openai",
    "model": "gpt-a",
    "params": {"stream": True, "temperature": 0.2},
    "system_prompt": "You are careful.\nAnswer briefly.\nCite files.",
    "tools": [READ, WRITE],
    "thinking_level": "off",
}


def changed(**fields: Any) -> dict[str, Any]:
    return {**BASE, "reason": "change", **fields}


def test_the_first_header_has_nothing_to_compare_with() -> None:
    diff = diff_headers(None, BASE)
    assert diff.first and not diff.changed and diff.summary == ()
    assert not header_changed(None, BASE)


def test_a_repeated_header_changes_nothing_whatever_its_reason() -> None:
    diff = diff_headers(BASE, {**BASE, "reason": "resume"})
    assert not diff.first and not diff.changed
    assert not header_changed(BASE, {**BASE, "reason": "resume"})


def test_missing_fields_mean_the_runtimes_defaults() -> None:
    bare = {"provider": "offline", "model": "m"}
    full = {**bare, "params": {}, "system_prompt": "", "tools": [], "thinking_level": "off"}
    assert not diff_headers(bare, full).changed
    assert not header_changed(full, bare)


def test_integral_floats_equal_integers_as_jsonb_gives_them_back() -> None:
    before = changed(params={"max_tokens": 100.0})
    after = changed(params={"max_tokens": 100})
    assert not diff_headers(before, after).changed and not header_changed(before, after)


SETTINGS_CASES = [
    ({"model": "gpt-b"}, (ValueChange("model", '"gpt-a"', '"gpt-b"'),), ("model",)),
    (
        {"provider": "anthropic", "model": "claude"},
        (
            ValueChange("provider", '"openai"', '"anthropic"'),
            ValueChange("model", '"gpt-a"', '"claude"'),
        ),
        ("provider", "model"),
    ),
    (
        {"thinking_level": "high"},
        (ValueChange("thinking_level", '"off"', '"high"'),),
        ("thinking",),
    ),
]


@pytest.mark.parametrize(("fields", "expected", "summary"), SETTINGS_CASES)
def test_settings_that_differ(
    fields: dict[str, Any], expected: tuple[ValueChange, ...], summary: tuple[str, ...]
) -> None:
    diff = diff_headers(BASE, changed(**fields))
    assert diff.settings == expected and diff.summary == summary
    assert diff.params == () and diff.system_prompt == () and diff.tools_changed == ()


def test_parameters_added_removed_and_changed_by_key() -> None:
    diff = diff_headers(BASE, changed(params={"stream": True, "temperature": 0.7, "top_p": 1}))
    assert diff.params == (
        ValueChange("temperature", "0.2", "0.7"),
        ValueChange("top_p", None, "1"),
    )
    gone = diff_headers(BASE, changed(params={"temperature": 0.2}))
    assert gone.params == (ValueChange("stream", "true", None),)
    assert gone.summary == ("params",)


def test_the_system_prompt_as_a_line_diff() -> None:
    diff = diff_headers(
        BASE, changed(system_prompt="You are careful.\nAnswer at length.\nCite files.")
    )
    (hunk,) = diff.system_prompt
    assert hunk.heading == "@@ -1,3 +1,3 @@"
    assert hunk.lines == (
        DiffLine("context", "You are careful.", 1, 1),
        DiffLine("removed", "Answer briefly.", 2, None),
        DiffLine("added", "Answer at length.", None, 2),
        DiffLine("context", "Cite files.", 3, 3),
    )
    assert diff.summary == ("prompt",)


def test_far_apart_changes_are_separate_hunks_with_context() -> None:
    before = "\n".join(f"line {i}" for i in range(1, 21))
    after = before.replace("line 2\n", "line two\n").replace("line 19", "line nineteen")
    hunks = text_diff(before, after)
    assert [h.heading for h in hunks] == ["@@ -1,5 +1,5 @@", "@@ -16,5 +16,5 @@"]
    assert [line.text for line in hunks[1].lines if line.kind == "added"] == ["line nineteen"]


def test_a_prompt_that_differs_only_in_its_final_newline_still_shows_a_change() -> None:
    (hunk,) = text_diff("Be brief.", "Be brief.\n")
    assert [(line.kind, line.text) for line in hunk.lines] == [
        ("removed", "Be brief."),
        ("added", "Be brief."),
    ]


def test_a_prompt_made_from_nothing_starts_at_line_zero() -> None:
    (hunk,) = text_diff("", "New.\nRules.")
    assert hunk.heading == "@@ -0,0 +1,2 @@"


def test_tools_added_removed_and_changed() -> None:
    search = {"name": "search", "description": "Search.", "parameters": {"type": "object"}}
    read_v2 = {
        **READ,
        "description": "Read a text file.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
        },
    }
    diff = diff_headers(BASE, changed(tools=[read_v2, search]))
    assert diff.tools_added == ("search",)
    assert diff.tools_removed == ("write_file",)
    (tool,) = diff.tools_changed
    assert tool.name == "read_file"
    assert tool.fields == (ValueChange("description", '"Read a file."', '"Read a text file."'),)
    added = [line.text.strip() for h in tool.parameters for line in h.lines if line.kind == "added"]
    assert '"limit": {' in added
    assert diff.summary == ("tools +1 −1 ~1",)


def test_reordered_tools_change_nothing_by_name() -> None:
    diff = diff_headers(BASE, changed(tools=[WRITE, READ]))
    assert diff.tools_added == diff.tools_removed == diff.tools_changed == ()
    # ...but the order is part of the request, so the header did change.
    assert header_changed(BASE, changed(tools=[WRITE, READ]))


def test_malformed_fields_are_compared_not_trusted() -> None:
    odd = changed(params="not a mapping", tools=["not a tool", {"description": "no name"}])
    diff = diff_headers(BASE, odd)
    assert {c.name for c in diff.params} == {"stream", "temperature"}
    assert diff.tools_added == ("",) and set(diff.tools_removed) == {"read_file", "write_file"}


# --- properties --------------------------------------------------------------------------

text_lines = st.lists(st.sampled_from(["a", "b", "c", "", "d e", "<x>"]), max_size=12)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from(["x", "y"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("pq"), inner),
    max_leaves=5,
)
tools = st.lists(
    st.builds(
        lambda name, description, parameters: {
            "name": name,
            "description": description,
            "parameters": parameters,
        },
        st.sampled_from(["read", "write", "search"]),
        st.sampled_from(["one", "two"]),
        json_values,
    ),
    max_size=3,
)
headers = st.fixed_dictionaries(
    {
        "provider": st.sampled_from(["offline", "openai"]),
        "model": st.sampled_from(["m1", "m2"]),
        "params": st.dictionaries(st.sampled_from(["t", "k", "stream"]), json_values, max_size=3),
        "system_prompt": text_lines.map("\n".join),
        "tools": tools,
        "thinking_level": st.sampled_from(["off", "low", "high"]),
    }
)


@given(headers)
def test_a_header_against_itself_changes_nothing(header: dict[str, Any]) -> None:
    assert not diff_headers(header, dict(header)).changed
    assert not header_changed(header, dict(header))


@given(headers, headers)
def test_a_diff_that_shows_a_change_means_the_header_changed(
    before: dict[str, Any], after: dict[str, Any]
) -> None:
    diff: HeaderDiff = diff_headers(before, after)
    if diff.changed:
        assert header_changed(before, after)
    if not header_changed(before, after):
        assert not diff.changed


@given(text_lines, text_lines)
def test_the_hunks_hold_every_changed_line_of_both_sides(
    before: list[str], after: list[str]
) -> None:
    old, new = "\n".join(before), "\n".join(after)
    hunks = text_diff(old, new, context=10_000)
    if old == new:
        assert hunks == ()
        return
    (hunk,) = hunks  # with unbounded context, one hunk holds the whole text
    assert [line.text for line in hunk.lines if line.kind != "added"] == old.splitlines()
    assert [line.text for line in hunk.lines if line.kind != "removed"] == new.splitlines()
