"""A session's prompt and tools as Pi 1.6 system messages in its export, and a fork's
export with the system messages of the path it copied."""

from __future__ import annotations

import uuid
from typing import Any

from projections.pi_system import LeafMove, PromptChange, fork_chain, with_system_messages
from projections.records import EntryRecord

T = "2026-01-01T00:00:00.000Z"
PARENT = uuid.UUID(int=1)
FORK = uuid.UUID(int=2)
READ = {"name": "read", "description": "Read a file", "parameters": {"type": "object"}}
GREP = {"name": "grep", "description": "Search", "parameters": {"type": "object"}}


def entry(entry_id: str, parent: str | None, seq: int, kind: str = "message") -> EntryRecord:
    data: dict[str, Any] = {"type": kind, "id": entry_id, "parentId": parent, "timestamp": T}
    if kind == "message":
        data["message"] = {"role": "user", "content": entry_id, "timestamp": 0}
    else:
        data.update(summary="S", firstKeptEntryId=entry_id, tokensBefore=1)
    return EntryRecord(entry_id, parent, kind, T, data, seq)


def change(seq: int, prompt: str, *tools: dict[str, Any]) -> PromptChange:
    return PromptChange(seq, T, prompt, tuple(tools))


def roles(lines: list[Any]) -> list[str]:
    return [
        d["id"] if d["type"] != "message" or d["message"]["role"] != "system" else "S"
        for d in lines
    ]


def test_a_fork_writes_its_parents_system_messages_among_the_copied_entries() -> None:
    # The parent: a header before u1, another (a tool added) before u3, a compaction.
    parent = [
        entry("u1", None, 2),
        entry("u2", "u1", 3),
        entry("u3", "u2", 5),
        entry("c", "u3", 6, "compaction"),
    ]
    changes = [change(1, "Be kind.", READ), change(4, "Be kind.", READ, GREP)]
    woven = list(with_system_messages(parent, changes, [], PARENT))
    assert roles(woven) == ["S", "u1", "u2", "S", "u3", "c"]
    # The fork copies the path to c, then its own first request has the same prompt and
    # tools, and a reply follows.
    copied = [entry(e.id, e.parent_id, i + 1, e.type) for i, e in enumerate(parent)]
    own = [entry("u4", "c", 7)]
    chain = fork_chain(iter(woven), "c")
    out = list(
        with_system_messages(
            [*copied, *own],
            [change(6, "Be kind.", READ, GREP)],
            [LeafMove(5, "c")],
            FORK,
            inherited=chain,
        )
    )
    assert roles(out) == roles(woven) + ["u4"]  # no system message anew: nothing changed
    assert out[:6] == woven  # the same ids, parents, sections, tools and checkpoint
    assert out[5]["systemMessage"]["toolsAdded"] == [READ, GREP]
    # A later change in the fork patches the state the copied path left.
    patched = list(
        with_system_messages(
            [*copied, *own], [change(6, "Be brief.", READ, GREP)], [], FORK, inherited=chain
        )
    )
    system = patched[-2]
    assert system["message"]["sections"] == {"preamble": "Be brief."}
    assert "toolsAdded" not in system["message"] and patched[-1]["parentId"] == system["id"]
