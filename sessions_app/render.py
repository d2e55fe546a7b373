"""Safe rendering of text that users, models and tools wrote.

Markdown goes through markdown-it-py with raw HTML disabled, code blocks are highlighted
with Pygments, and the result is sanitized by nh3 against an allow-list of tags and
attributes. Links keep only absolute http, https and mailto targets; markdown images become
plain links (a remote image in a transcript would be fetched by every viewer). Whatever the
text holds, the output cannot run script or load anything.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

import nh3
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt
from markdown_it.renderer import RendererHTML
from markdown_it.rules_core import StateCore
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict
from pygments import highlight as pygments_highlight
from pygments.formatters import HtmlFormatter
from pygments.lexer import Lexer
from pygments.lexers import get_lexer_by_name, get_lexer_for_filename
from pygments.util import ClassNotFound

# Longer code blocks are shown without highlighting: Pygments is linear but not fast.
HIGHLIGHT_LIMIT = 100_000
# Longer texts are shown as plain preformatted text instead of markdown.
MARKDOWN_LIMIT = 400_000

LINK_SCHEMES = ("http://", "https://", "mailto:")

_TAGS = {
    "a", "p", "br", "hr", "em", "strong", "del", "s", "code", "pre", "span", "div",
    "blockquote", "ul", "ol", "li", "h1", "h2", "h3", "h4", "h5", "h6",
    "table", "thead", "tbody", "tr", "th", "td",
}  # fmt: skip
_ATTRIBUTES = {
    "a": {"href", "title"},
    "code": {"class"},
    "pre": {"class"},
    "span": {"class"},
    "div": {"class"},
    "ol": {"start"},
    "th": {"class"},
    "td": {"class"},
}
_CLEAN_CONTENT = {"script", "style", "template", "iframe", "object", "embed", "svg", "math"}


def _safe_attribute(tag: str, name: str, value: str) -> str | None:
    if name == "href":
        return value if value.strip().lower().startswith(LINK_SCHEMES) else None
    if name == "class":
        # Pygments' short token classes and our own language-* marker only.
        parts = [c for c in value.split() if c.replace("-", "").replace("_", "").isalnum()]
        return " ".join(parts) or None
    return value


def sanitize(html: str) -> str:
    """Keep only the allowed tags and attributes; drop unsafe links."""
    return nh3.clean(
        html,
        tags=_TAGS,
        clean_content_tags=_CLEAN_CONTENT,
        attributes=_ATTRIBUTES,
        attribute_filter=_safe_attribute,
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
        strip_comments=True,
    )


def _highlight(code: str, lang: str, _attrs: str) -> str:
    if not lang or len(code) > HIGHLIGHT_LIMIT:
        return ""
    lexer = _lexer(lang.split()[0])
    if lexer is None:
        return ""
    body = pygments_highlight(code, lexer, _formatter())
    return f'<pre class="code"><code class="highlight">{body}</code></pre>'


# A formatter builds its style table when made (a few milliseconds), and finding a lexer
# by name searches the registry: both are made once and reused (neither keeps state
# between two `highlight` calls).
@lru_cache(maxsize=1)
def _formatter() -> HtmlFormatter:
    return HtmlFormatter(nowrap=True)


@lru_cache(maxsize=64)
def _lexer(name: str) -> Lexer | None:
    try:
        return get_lexer_by_name(name, stripnl=False)
    except ClassNotFound:
        return None


def _image_as_link(
    renderer: RendererHTML,
    tokens: Sequence[Token],
    idx: int,
    options: OptionsDict,
    env: EnvType,
) -> str:
    token = tokens[idx]
    src = str(token.attrGet("src") or "")
    alt = "".join(child.content for child in token.children or ()) or src
    return f'<a href="{escape(src)}">[image: {escape(alt)}]</a>'


@lru_cache(maxsize=1)
def _markdown() -> MarkdownIt:
    md = MarkdownIt(
        "commonmark",
        {"html": False, "linkify": False, "typographer": False, "highlight": _highlight},
    )
    md.enable(["table", "strikethrough"])
    md.add_render_rule("image", _image_as_link)
    md.core.ruler.push("align_cells_by_class", _align_cells_by_class)
    return md


def _align_cells_by_class(state: StateCore) -> None:
    # markdown-it aligns table cells with a style attribute, which the pages'
    # Content-Security-Policy refuses; a class (align-left/center/right) does the same.
    for token in state.tokens:
        if token.type in ("th_open", "td_open") and token.attrs.get("style"):
            style = str(token.attrs.pop("style"))
            token.attrSet("class", "align-" + style.removeprefix("text-align:"))


class _Rendered:
    """What texts were rendered to, most recently used first, up to `MEMO_CHARS` characters
    of text and HTML in all (a text longer than `MEMO_TEXT_CHARS` is not kept).

    Rendering is a pure function of the text and costs a millisecond or more a message,
    while a page is drawn again on every reload and every live refresh of a running turn,
    from messages that do not change: each is rendered once, then read back."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self.chars = 0
        # (what: "" for markdown, "code:<language>" for code; the text) → HTML
        self.items: OrderedDict[tuple[str, str], str] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: tuple[str, str], render: Callable[[], str]) -> str:
        with self.lock:
            found = self.items.get(key)
            if found is not None:
                self.items.move_to_end(key)
                return found
        html = render()
        size = len(key[1]) + len(html)
        if len(key[1]) > MEMO_TEXT_CHARS or size > self.max_chars:
            return html
        with self.lock:
            if key not in self.items:
                self.items[key] = html
                self.chars += size
            while self.chars > self.max_chars:
                (_, text), old = self.items.popitem(last=False)
                self.chars -= len(text) + len(old)
        return html

    def clear(self) -> None:
        with self.lock:
            self.items.clear()
            self.chars = 0


MEMO_CHARS = 8_000_000
MEMO_TEXT_CHARS = 100_000
_rendered = _Rendered(MEMO_CHARS)


def render_markdown(text: Any) -> SafeString:
    """Markdown to sanitized HTML, safe to put in any page."""
    source = str(text or "")
    if not source.strip():
        return mark_safe("")
    if len(source) > MARKDOWN_LIMIT:
        return mark_safe(f'<pre class="plain">{escape(source)}</pre>')
    html = _rendered.get(("", source), lambda: sanitize(_markdown().render(source)))
    return mark_safe(html)  # sanitized


def highlight_code(code: str, language: str) -> SafeString:
    """Highlighted code (JSON schemas, tool arguments), escaped when no lexer fits."""
    return mark_safe(
        _rendered.get((f"code:{language}", code), lambda: _highlighted(code, language))
    )


def _highlighted(code: str, language: str) -> str:
    html = _highlight(code, language, "")
    if not html:
        return f'<pre class="code"><code>{escape(code)}</code></pre>'
    return sanitize(html)


def highlight_file(path: str, text: str) -> SafeString:
    """A workspace file's text, highlighted by its name's language (escaped when none is
    known or the text is past `HIGHLIGHT_LIMIT`)."""
    return highlight_code(text, language_of(path) or "")


def language_of(path: str) -> str | None:
    """The Pygments language a file's name says (`notes.py` → python), if any."""
    name = path.rsplit("/", 1)[-1]
    stem, dot, suffix = name.rpartition(".")
    return _language_of_name(f"x.{suffix}" if dot and stem else name[:100])


@lru_cache(maxsize=256)
def _language_of_name(name: str) -> str | None:
    try:
        lexer = get_lexer_for_filename(name)
    except ClassNotFound:
        return None
    aliases = getattr(lexer, "aliases", None) or ()
    return str(aliases[0]) if aliases else None


def pygments_css() -> str:
    """The stylesheet for highlighted code (light and dark)."""
    light = HtmlFormatter(style="default").get_style_defs(".highlight")
    dark = HtmlFormatter(style="monokai").get_style_defs(".highlight")
    return f"{light}\n@media (prefers-color-scheme: dark) {{\n{dark}\n}}\n"
