"""Reading the session page's tree to its end through its own links, as a browser does: with
htmx (each link replaced by its window's lines) or without JavaScript (each link's page)."""

from __future__ import annotations

import html as html_lib
import re
from dataclasses import dataclass, field
from typing import Any

from django.test import Client
from django.urls import reverse

_ITEM = re.compile(
    r'<li class="node [^"]*" id="node-([^"]+)"'
    r'|<li class="tree-load [^"]*"><a href="([^"]*)" hx-get="([^"]*)"[^>]*data-tree-load="(\w+)"'
)


REQUESTS_MAX = 2000


@dataclass
class Reading:
    ids: list[str] = field(default_factory=list)  # rows in reading order
    requests: int = 0
    largest: int = 0  # bytes of the largest answer
    widest: int = 0  # rows of the largest answer after the first
    kinds: set[str] = field(default_factory=set)  # the kinds of links followed


def tree_of(page: str) -> str:
    """The tree's part of a whole page."""
    return page[page.index('<nav id="tree"') : page.index('id="main"')]


def items(part: str) -> list[tuple[str, str, str]]:
    """("row", id, "") and ("link", url, kind) in the order drawn."""
    found: list[tuple[str, str, str]] = []
    for match in _ITEM.finditer(part):
        if match.group(1):
            found.append(("row", match.group(1), ""))
        else:
            found.append(("link", html_lib.unescape(match.group(3)), match.group(4)))
    return found


def read_with_htmx(client: Client, session: Any, query: str = "?tree=1") -> Reading:
    """The first window, then every link replaced by the lines of its window, in place."""
    base = reverse("session", args=[session.id])
    reading = Reading()
    first = client.get(base + query)
    assert first.status_code == 200
    reading.requests, reading.largest = 1, len(first.content)
    pending = list(reversed(items(tree_of(first.content.decode()))))
    while pending:
        kind, value, link_kind = pending.pop()
        if kind == "row":
            reading.ids.append(value)
            continue
        response = client.get(base + value, HTTP_HX_REQUEST="true")
        assert response.status_code == 200, response.content[:300]
        reading.requests += 1
        assert reading.requests < REQUESTS_MAX, "the tree's links go round in a circle"
        reading.largest = max(reading.largest, len(response.content))
        reading.kinds.add(link_kind)
        found = items(response.content.decode())
        reading.widest = max(reading.widest, sum(1 for item in found if item[0] == "row"))
        pending.extend(reversed(found))
    return reading


def read_without_javascript(client: Client, session: Any, query: str = "?tree=1") -> Reading:
    """The first page, then the page of every link (its plain `href`), each once."""
    base = reverse("session", args=[session.id])
    reading = Reading()
    seen: set[str] = set()
    queue = [query]
    while queue:
        url = queue.pop()
        response = client.get(base + url)
        assert response.status_code == 200, response.content[:300]
        reading.requests += 1
        assert reading.requests < REQUESTS_MAX, "the tree's links go on without end"
        reading.largest = max(reading.largest, len(response.content))
        for kind, value, link_kind in items(tree_of(response.content.decode())):
            if kind == "row":
                reading.ids.append(value)
                continue
            href = value.removesuffix("&fragment=tree-more")
            if href not in seen:
                seen.add(href)
                reading.kinds.add(link_kind)
                queue.append(href)
    return reading
