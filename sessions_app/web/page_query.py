"""What a session page's URL says: the view, the branch and the window shown.

The pages parse it from the query string and write links with it; the HTML export renders
the pages' templates with the default one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any
from urllib.parse import parse_qs, urlencode

from django.urls import reverse

from sessions_app.bad_input import BadInput, check_text
from sessions_app.models import Session

VIEWS = ("chat", "trace", "context", "files")
FILE_PATH_MAX = 4096  # a workspace path (the files API's bound)
NUMBER_MAX = 2**62  # a seq or a turn (the API's `SEQ_MAX`): more is no page of ours
TREE_CURSOR_MAX = 400  # a tree cursor (the API's `CURSOR_MAX`)
TREE_QUERY_MAX = 500  # words searched for in the tree (the search's `QUERY_MAX`)


@dataclass(frozen=True, slots=True)
class PageQuery:
    """The query string of a session page; every field has its own URL parameter."""

    view: str = "chat"
    leaf: str | None = None  # show this leaf instead of the current one (a deep link)
    entry: str | None = None  # scroll to and highlight this entry
    request: int | None = None  # context: the `request/sent` seq (default: the latest)
    before: int | None = None  # trace: the page of turns before this turn
    span: str | None = None  # trace: the selected span
    turn: int | None = None  # trace: the selected span's turn
    scope: str = "branch"  # trace and context: the shown branch, or "all"
    all: bool = False  # chat and context: everything, not only the latest window
    tree: bool = False  # the whole tree: its windows read on as it is scrolled
    edit: str | None = None  # chat: the user message being edited (to resend)
    mark: str | None = None  # tree: an entry picked to compare with another
    file: str | None = None  # files: the workspace file shown
    files_from: int | None = None  # files: the page of the file tree from this file on
    tree_at: str | None = None  # tree: the window this cursor names, read on to
    tree_rows: str | None = None  # tree: only rows "a-b" of that window (a run opened)
    tree_indent: int | None = None  # tree: the indent the window's rows are drawn from
    tree_up: bool = False  # tree: the window is read upwards (what is below it is drawn)
    tree_q: str | None = None  # tree: the words searched for in the session's entries

    @classmethod
    def parse(cls, params: Mapping[str, Any]) -> PageQuery:
        """The page a query names. A word that is not a number is left out, as an unknown
        view is; a NUL (which no query could look up) and a number past any seq are
        refused with BadInput, which the pages answer with 400."""

        def text(name: str, limit: int = 64) -> str | None:
            value = params.get(name)
            value = value[-1] if isinstance(value, list) else value
            if not value:
                return None
            return check_text(str(value), f"the parameter {name!r}").strip()[:limit] or None

        def number(name: str) -> int | None:
            value = text(name, 20)
            try:
                found = int(value) if value is not None else None
            except ValueError:
                return None
            if found is not None and abs(found) > NUMBER_MAX:
                raise BadInput(f"the parameter {name!r} is out of range")
            return found

        view = text("view")
        return cls(
            view=view if view in VIEWS else "chat",
            leaf=text("leaf"),
            entry=text("entry"),
            request=number("request"),
            before=number("before"),
            span=text("span", 200),
            turn=number("turn"),
            scope="all" if text("scope") == "all" else "branch",
            all=text("all") == "1",
            tree=text("tree") == "1",
            edit=text("edit"),
            mark=text("mark"),
            file=text("file", FILE_PATH_MAX),
            files_from=number("files_from"),
            tree_at=text("tree_at", TREE_CURSOR_MAX),
            tree_rows=text("tree_rows", 24),
            tree_indent=number("tree_indent"),
            tree_up=text("tree_up") == "1",
            tree_q=text("tree_q", TREE_QUERY_MAX),
        )

    @classmethod
    def from_querystring(cls, query: str) -> PageQuery:
        return cls.parse(parse_qs(query))

    def params(self, **changes: Any) -> dict[str, str]:
        changed = replace(self, **changes)
        default = PageQuery()
        out: dict[str, str] = {}
        for f in fields(self):
            value = getattr(changed, f.name)
            if value == getattr(default, f.name) or value is None:
                continue
            out[f.name] = "1" if value is True else str(value)
        return out

    def querystring(self, **changes: Any) -> str:
        params = self.params(**changes)
        return "?" + urlencode(params) if params else ""

    def url(self, session: Session, **changes: Any) -> str:
        return reverse("session", args=[session.id]) + self.querystring(**changes)

    def view_only(self) -> PageQuery:
        """What a view switch keeps: the branch shown, nothing view-specific (the tree is
        drawn again around the branch)."""
        return PageQuery(leaf=self.leaf, tree=self.tree, mark=self.mark)
