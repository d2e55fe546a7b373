"""Template filters and tags of the pages: safe markdown, numbers, durations, URLs."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from html import escape as html_escape
from typing import Any
from urllib.parse import urlencode

from django import template
from django.template.defaultfilters import truncatechars
from django.urls import reverse
from django.utils import timezone
from django.utils.safestring import SafeString, mark_safe

from projections.chat import Usage
from sessions_app.render import highlight_code, render_markdown

register = template.Library()

CLIP_CHARS = 20_000
JSON_CHARS = 50_000
# Indent levels of the tree that CSS draws (classes d0…d24 in strand.css); a deeper row is
# drawn at the last level with its level written out, so no row grows with its depth.
TREE_DRAWN_INDENT = 24


@register.filter
def markdown(text: Any) -> SafeString:
    """Markdown rendered and sanitized (see sessions_app.render)."""
    return render_markdown(text)


@register.filter
def code_json(value: Any) -> SafeString:
    """A JSON value, indented and highlighted."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return highlight_code(clip(value, JSON_CHARS), "text")
    text = pretty_json(value)
    if len(text) > JSON_CHARS:
        rest = len(text) - JSON_CHARS
        return highlight_code(f"{text[:JSON_CHARS]}\n… {rest:,} more characters", "text")
    return highlight_code(text, "json")


@register.filter
def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str, sort_keys=False)


@register.filter
def num(value: Any) -> str:
    """1234567 → 1,234,567."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "—" if value is None else str(value)
    return f"{value:,}" if isinstance(value, int) else f"{value:,.2f}"


@register.filter
def tokens(value: Any) -> str:
    """A short token count: 950, 12.3k, 1.2M."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return "—"
    if value < 1000:
        return str(int(value))
    if value < 1_000_000:
        return f"{value / 1000:.1f}k".replace(".0k", "k")
    return f"{value / 1_000_000:.1f}M".replace(".0M", "M")


@register.filter
def ms(value: Any) -> str:
    """A duration in milliseconds, readable: 850 ms, 1.2 s, 3 min 4 s."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return "—"
    if value < 1000:
        return f"{int(value)} ms"
    seconds = value / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


@register.filter
def cost(value: Any) -> str:
    if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
        return "$0"
    if value < 0.01:
        return f"${value:.4f}"
    return f"${value:.2f}"


@register.filter
def ago(value: Any) -> str:
    """How long ago, in words: "just now", "5 min ago", "3 h ago", else the date."""
    moment = as_datetime(value)
    if moment is None:
        return ""
    delta = (timezone.now() - moment).total_seconds()
    if delta < 45:
        return "just now"
    if delta < 3600:
        return f"{int(delta // 60) or 1} min ago"
    if delta < 86400:
        return f"{int(delta // 3600)} h ago"
    if delta < 86400 * 7:
        return f"{int(delta // 86400)} d ago"
    return moment.strftime("%Y-%m-%d")


@register.filter
def as_datetime(value: Any) -> datetime | None:
    """A datetime, an ISO string (Pi timestamps) or epoch milliseconds → aware datetime."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return datetime.fromtimestamp(value / 1000, tz=UTC)
        except (OverflowError, OSError, ValueError):
            return None
    if isinstance(value, str) and value:
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return None


@register.filter
def clock(value: Any) -> str:
    """Time of day with seconds (UTC), for timelines."""
    moment = as_datetime(value)
    return moment.strftime("%H:%M:%S") if moment else ""


@register.filter
def stamp(value: Any) -> str:
    moment = as_datetime(value)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC") if moment else ""


@register.filter
def iso(value: Any) -> str:
    moment = as_datetime(value)
    return moment.isoformat() if moment else ""


@register.filter
def clip(text: Any, limit: int = CLIP_CHARS) -> str:
    value = str(text or "")
    return value if len(value) <= limit else value[:limit]


@register.filter
def clipped(text: Any, limit: int = CLIP_CHARS) -> int:
    """How many characters `clip` left out."""
    return max(0, len(str(text or "")) - limit)


@register.filter
def value_text(value: Any) -> str:
    """A trace input or output value as text."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, Usage):
        return usage_text(value)
    if isinstance(value, datetime):
        return stamp(value)
    if isinstance(value, tuple | list):
        return ", ".join(str(v) for v in value) or "—"
    if isinstance(value, Mapping):
        return pretty_json(dict(value))
    return str(value)


@register.filter
def usage_text(usage: Any) -> str:
    if not isinstance(usage, Usage):
        return "—"
    parts = [f"in {usage.input:,}", f"out {usage.output:,}"]
    if usage.cache_read:
        parts.append(f"cache read {usage.cache_read:,}")
    if usage.cache_write:
        parts.append(f"cache write {usage.cache_write:,}")
    parts.append(f"total {usage.total_tokens:,}")
    parts.append(cost(usage.cost))
    return " · ".join(parts)


@register.filter
def indent_class(indent: Any) -> str:
    """The CSS class that indents a tree row `indent` levels (at most TREE_DRAWN_INDENT)."""
    level = indent if isinstance(indent, int) and indent > 0 else 0
    return f"d{min(level, TREE_DRAWN_INDENT)}"


@register.filter
def indent_hidden(indent: Any) -> bool:
    """Whether a row is deeper than CSS draws, so its level is written out instead."""
    return isinstance(indent, int) and indent > TREE_DRAWN_INDENT


@register.filter
def is_long(value: Any) -> bool:
    return isinstance(value, str) and (len(value) > 80 or "\n" in value)


@register.filter
def short_id(value: Any) -> str:
    return str(value or "")[:8]


@register.filter
def role_name(role: Any) -> str:
    return {
        "user": "You",
        "assistant": "Assistant",
        "toolResult": "Tool result",
        "bashExecution": "Shell",
        "custom": "Custom",
        "compactionSummary": "Compaction summary",
        "branchSummary": "Branch summary",
    }.get(str(role), str(role))


@register.simple_tag(takes_context=True)
def page_url(context: template.Context, **changes: Any) -> str:
    """The session page URL with the current query, some parameters changed."""
    return _session_url(context) + _querystring(context, changes)


def _querystring(context: template.Context, changes: dict[str, Any]) -> str:
    """The page's query string with `changes`, made once a render for each set of changes
    (a link's `href` and `hx-get` ask for the same one)."""
    query = context["q"]
    key = f"strand.querystring:{id(query)}:{sorted(changes.items())!r}"
    found = context.render_context.get(key)
    if found is None:
        found = context.render_context[key] = str(query.querystring(**changes))
    return str(found)


@register.simple_tag(takes_context=True)
def page_path(context: template.Context) -> str:
    """The session page's path, without a query: the owner's page, or the guest page of a
    share link (whose view sets `page_path`)."""
    return _session_url(context)


def _session_url(context: template.Context) -> str:
    """The session page's path, reversed once a render: the trace repeats `page_url` on
    every span, and reversing a URL costs more than the rest of the tag. A share link's
    guest page names its own path (`page_path`)."""
    given = context.get("page_path")
    if given:
        return str(given)
    session_id = context["session"].id
    key = f"strand.session_url:{session_id}"
    url = context.render_context.get(key)
    if url is None:
        url = context.render_context[key] = reverse("session", args=[session_id])
    return str(url)


@register.simple_tag(takes_context=True)
def rel_url(context: template.Context, **changes: Any) -> str:
    """The current page's URL relative to itself (`?view=…&entry=…`), some parameters
    changed: short enough to repeat on every row of a long tree or chat."""
    return _querystring(context, changes) or "?"


@register.simple_tag(takes_context=True)
def return_to(context: template.Context) -> str:
    """The current page's query string, for the `return_to` field of forms."""
    return str(context["q"].querystring())


@register.simple_tag(takes_context=True)
def view_url(context: template.Context, view: str, current: bool = False) -> str:
    """Switch to another view, keeping the branch shown (or back to the current one)."""
    query = context["q"].view_only()
    changes: dict[str, Any] = {"view": view}
    if current:
        changes["leaf"] = None
    return _session_url(context) + str(query.querystring(**changes))


@register.simple_tag(takes_context=True)
def live_url(context: template.Context) -> str:
    """Where the page fetches its refreshed parts when events arrive."""
    params = context["q"].params()
    params["fragment"] = "live"
    return _session_url(context) + "?" + urlencode(params)


# A tree row's chip: by marker, then by message role, then by entry type.
_MARKER_CHIPS = {"compaction": "compacted", "branch_summary": "summary"}
_ROLE_CHIPS = {"user": "user", "assistant": "agent", "toolResult": "tool", "system": "system"}
_TYPE_CHIPS = {
    "label": "label",
    "model_change": "model",
    "thinking_level_change": "think",
    "session_info": "name",
    "context_edit": "edit",
    "usage": "usage",
}


@register.simple_tag
def node_text(node: Any, current_leaf: Any) -> SafeString:
    """A tree row's text: its chip, its one-line text, its label and the current leaf's
    mark. Drawn in Python: it is on every row of the tree, where a template of its own
    cost more than the rest of the row."""
    return mark_safe(_node_text(node, current_leaf))  # escaped in _node_text


def _node_text(node: Any, current_leaf: Any) -> str:
    role, kind = node.role, node.type
    chip = _MARKER_CHIPS.get(node.marker) if node.marker else None
    if chip is None and role:
        chip = _ROLE_CHIPS.get(role) or truncatechars(role, 6)
    if chip is None:
        chip = _TYPE_CHIPS.get(kind) or truncatechars(kind, 8)
    chip_class = f"r-{role}" if role else f"t-{kind}"
    html = (
        f'<span class="chip {_e(chip_class)}">{_e(chip)}</span>'
        f'<span class="text">{_e(node.text)}</span>'
    )
    if node.label:
        html += f'<span class="label-badge" title="Label">{_e(node.label)}</span>'
    if node.id == current_leaf:
        html += '<span class="here" title="The current leaf">●</span>'
    return html


def _e(value: Any) -> str:
    """What `{{ value }}` writes (Django's `escape` is this, marked safe)."""
    return html_escape(str(value))


@register.simple_tag(takes_context=True)
def tree_row(context: template.Context, row: Any) -> SafeString:
    """One row of the tree (`<li>`): drawn in Python, for the same reason as `node_text`,
    from the page's `q`, `current_leaf` and `can_write`. Every value is escaped with `_e`."""
    node, query = row.node, context.get("q")
    current_leaf = context.get("current_leaf")
    node_id = _e(node.id)
    # A further window's rows hang from the row they continue (`tree_indent`), and their
    # depth is from the root (`tree_depth_offset`); the leaf shown is the window's.
    indent = row.display_indent + int(context.get("tree_indent") or 0)
    depth = node.depth + int(context.get("tree_depth_offset") or 0)
    shown_leaf = context.get("tree_leaf", node.id if node.is_current_leaf else None)
    classes = [indent_class(indent), f"t-{node.type}"]
    if node.role:
        classes.append(f"r-{node.role}")
    marks = (
        (node.on_active_path, "on-path"),
        (node.id == shown_leaf, "shown-leaf"),
        (node.id == current_leaf, "current"),
        (node.id == getattr(query, "entry", None), "selected"),
        (node.id == getattr(query, "mark", None), "marked"),
        (node.label, "labeled"),
    )
    classes += [name for on, name in marks if on]
    parts = [
        f'<li class="node {_e(" ".join(classes))}" id="node-{node_id}" data-id="{node_id}" '
        f'data-depth="{_e(depth)}">'
    ]
    if indent_hidden(indent):
        parts.append(f'<span class="deep" title="{_e(indent)} levels in">{_e(num(indent))}</span>')
    if row.connector:
        last = " last" if row.is_last else ""
        parts.append(f'<span class="conn{last}" aria-hidden="true"></span>')
    # A guest of one branch is not told where other branches leave it.
    if len(node.children) > 1 and not context.get("guest_branch"):
        parts.append(
            '<button type="button" class="fold js-only" aria-expanded="true" '
            f'title="Fold the {_e(node.descendants)} entries below" data-fold>▾</button>'
        )
    text = _node_text(node, current_leaf)
    if context.get("can_write"):
        parts.append(
            f'<button type="submit" form="leaf-form" name="entry_id" value="{node_id}" '
            f'class="node-text">{text}\n</button>'
        )
    else:
        view = _e(getattr(query, "view", ""))
        parts.append(f'<a class="node-text" href="?view={view}&amp;leaf={node_id}">{text}\n</a>')
    more_url = _e(query.querystring(entry=node.id) or "?") if query is not None else "?"
    parts.append(
        f'<a class="node-more" href="{more_url}#node-{node_id}" hx-get="{more_url}" '
        'hx-target="#tree" aria-label="Actions">⋯</a></li>'
    )
    return mark_safe("".join(parts))  # each value escaped above


@register.filter
def pair(pairs: Any, key: str) -> Any:
    """The value of `key` in a tuple of (key, value) pairs (a trace span's inputs)."""
    for name, value in pairs or ():
        if name == key:
            return value
    return None


_IMAGE_TYPES = {"image/png", "image/jpeg", "image/gif", "image/webp"}
_BASE64 = re.compile(r"^[A-Za-z0-9+/=\s]*$")


@register.filter
def key_of(mapping: Any, key: Any) -> Any:
    """`mapping[key]`, or None (a tool call's count of changed files, by its span key)."""
    return mapping.get(key) if isinstance(mapping, dict) else None


@register.filter
def image_src(image: Any) -> str:
    """A data: URI for an image block, or "" when it is not a plain raster image."""
    mime = str(getattr(image, "mime_type", "")).lower()
    data = str(getattr(image, "data", ""))
    if mime not in _IMAGE_TYPES or not data or not _BASE64.match(data):
        return ""
    return f"data:{mime};base64,{data}"


@register.filter
def args_line(arguments: Any) -> str:
    """Tool arguments on one short line: `path=README.md, content=…`."""
    if isinstance(arguments, Mapping):
        parts = []
        for key, value in arguments.items():
            text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            text = " ".join(str(text).split())
            parts.append(f"{key}={text[:60]}{'…' if len(text) > 60 else ''}")
        line = ", ".join(parts)
    else:
        line = " ".join(str(arguments or "").split())
    return line[:120] + ("…" if len(line) > 120 else "")


@register.filter
def status_text(status: Any) -> str:
    return {
        "ok": "done",
        "waiting_approval": "needs approval",
        "not_started": "not started",
        "interrupted": "outcome unknown",
    }.get(str(status), str(status))


@register.filter
def diff_rows(diff: Any) -> list[tuple[str, str]]:
    """Pi's edit diff (`+N text`, `-N text`, ` N text`, ` ... ` lines) as (kind, line) rows,
    kind `add`, `del` or `ctx`; at most `CLIP_CHARS` characters of it."""
    rows = []
    for line in clip(diff).split("\n"):
        kind = {"+": "add", "-": "del"}.get(line[:1], "ctx")
        rows.append((kind, line))
    return rows


@register.filter
def bash_run(details: Any) -> dict[str, Any]:
    """What the chat shows under a command's output: its exit code (or the signal, or why
    it was stopped), its wall time and the bytes of output left out."""
    if not isinstance(details, Mapping):
        return {}
    shown: dict[str, Any] = {}
    for key in ("exit_code", "signal", "stopped", "wall_time_seconds", "dropped_bytes"):
        value = details.get(key)
        if isinstance(value, int | float | str) and not isinstance(value, bool):
            shown[key] = value
    return shown


@register.filter
def child_session_of(details: Any) -> str | None:
    """The child session a `task` call's result names (`runtime.subagents`), when it is a
    session id: a result read from an imported file may hold anything there."""
    import uuid

    value = details.get("child_session") if isinstance(details, Mapping) else None
    try:
        return str(uuid.UUID(str(value))) if value else None
    except ValueError:
        return None
