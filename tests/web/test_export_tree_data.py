"""The HTML export's tree data and Pi lines hold a session's texts exactly, whatever they
are: markup and `</script>` in a message or a label cannot end their data block, and the
block reads back as the same rows (written a slice of rows at a time) and entries."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from sessions_app.services import pi_io
from tests.web.conftest import client_for

pytestmark = pytest.mark.django_db

HOSTILE = "</script><script>alert(1)</script> & <b>bold</b> \u2028 end"


def pi_file(entries: int) -> str:
    lines: list[dict[str, Any]] = [
        {"type": "session", "version": 3, "id": "s1", "timestamp": "2026-01-01T00:00:00.000Z"}
    ]
    parent = None
    for number in range(entries):
        entry_id = f"{number:08x}"
        lines.append(
            {
                "type": "message",
                "id": entry_id,
                "parentId": parent,
                "timestamp": "2026-01-01T00:00:01.000Z",
                "message": {"role": "user", "content": f"{HOSTILE} {number}"},
            }
        )
        parent = entry_id
    lines.append(
        {
            "type": "label",
            "id": "label001",
            "parentId": parent,
            "timestamp": "2026-01-01T00:00:02.000Z",
            "targetId": "00000000",
            "label": HOSTILE,
        }
    )
    return "".join(json.dumps(line) + "\n" for line in lines)


def block(html: str, element_id: str) -> str:
    start = html.index(f'id="{element_id}">') + len(f'id="{element_id}">')
    return html[start : html.index("</script>", start)]


def test_hostile_texts_stay_inside_the_tree_data_and_the_pi_lines(alice: User) -> None:
    text = pi_file(2500)  # more rows than one slice of the tree data
    session = pi_io.pi_import(source=io.BytesIO(text.encode()), owner=alice, name="h").session

    response = client_for(alice).get(reverse("session-export-html", args=[session.id]))
    html = b"".join(response.streaming_content).decode()  # type: ignore[attr-defined]

    assert "<script>alert(1)" not in html
    tree, lines = block(html, "tree-data"), block(html, "pi-jsonl")
    assert "<" not in tree and ">" not in tree and "&" not in tree
    assert "<" not in lines and ">" not in lines and "&" not in lines
    rows = json.loads(tree)["rows"]
    assert len(rows) == 2501
    assert [row[0] for row in rows] == [f"{n:08x}" for n in range(2500)] + ["label001"]
    assert rows[0][6] == f"{HOSTILE} 0" and rows[0][7] == HOSTILE
    # Lines end at "\n" only (str.splitlines would also cut at U+2028).
    written = [json.loads(line) for line in lines.split("\n") if line]
    assert written[1:] == [json.loads(line) for line in text.split("\n")[1:] if line]
