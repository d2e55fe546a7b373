from __future__ import annotations

from html.parser import HTMLParser

import pytest

from sessions_app.render import highlight_code, render_markdown


class _Elements(HTMLParser):
    """Every element and attribute of an HTML fragment, as a browser would see them."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attributes: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attributes += [(name, value or "") for name, value in attrs]


def elements(html: str) -> _Elements:
    parser = _Elements()
    parser.feed(html)
    return parser


HOSTILE = [
    "<script>alert(1)</script>",
    "hi <img src=x onerror=alert(1)>",
    '<a href="javascript:alert(1)" onclick="alert(2)">x</a>',
    "<svg><script>alert(1)</script></svg>",
    "<iframe src=https://example.com></iframe>",
    '<div style="background:url(javascript:alert(1))">x</div>',
    "[x](javascript:alert(1))",
    "[x](JaVaScRiPt:alert(1))",
    "[x](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "[x](vbscript:msgbox(1))",
    "[x](  javascript:alert(1))",
    "![img](javascript:alert(1))",
    '<p onmouseover="alert(1)">hover</p>',
    "`<script>` in code and ```\n<script>alert(1)</script>\n```",
    "<<script>script>alert(1)<</script>/script>",
    '[a](https://x.test/"onmouseover="alert(1))',
]


@pytest.mark.parametrize("source", HOSTILE)
def test_markdown_output_holds_no_script_handler_or_unsafe_link(source: str) -> None:
    found = elements(str(render_markdown(source)))
    assert not set(found.tags) & {"script", "img", "iframe", "svg", "style", "object", "embed"}
    for name, value in found.attributes:
        assert not name.startswith("on"), (name, value)
        assert name != "style" or value.startswith("text-align:")
        if name in ("href", "src"):
            assert value.startswith(("http://", "https://", "mailto:")), value


def test_markdown_escapes_raw_html_as_text() -> None:
    html = str(render_markdown('<b onclick="x">bold</b>'))
    assert "&lt;b onclick=" in html
    assert "<b" not in html


def test_links_keep_only_http_https_and_mailto() -> None:
    html = str(
        render_markdown(
            "[a](https://example.com) [b](http://example.com) [c](mailto:a@example.com) "
            "[d](/admin/) [e](ftp://example.com) [f](#top)"
        )
    )
    assert 'href="https://example.com"' in html
    assert 'href="http://example.com"' in html
    assert 'href="mailto:a@example.com"' in html
    assert html.count("href=") == 3
    assert 'rel="noopener noreferrer nofollow"' in html


def test_markdown_images_become_links_not_fetches() -> None:
    html = str(render_markdown("![a cat](https://example.com/cat.png)"))
    assert "<img" not in html
    assert '<a href="https://example.com/cat.png"' in html
    assert "[image: a cat]" in html


def test_code_is_highlighted_and_escaped() -> None:
    html = str(render_markdown("```python\nif a < b:\n    print('<b>')\n```"))
    assert '<span class="k">if</span>' in html
    assert "&lt;b&gt;" in html
    assert "<b>" not in html


def test_tables_and_emphasis_render() -> None:
    html = str(render_markdown("| a | b |\n|---|--:|\n| 1 | **2** |"))
    assert "<table>" in html and "<strong>2</strong>" in html
    # Aligned by class: the pages' Content-Security-Policy refuses style attributes.
    assert '<th class="align-right">b</th>' in html and "style=" not in html


def test_highlight_code_escapes_unknown_languages() -> None:
    html = str(highlight_code("<script>x</script>", "no-such-language"))
    assert "<script>" not in html and "&lt;script&gt;" in html
