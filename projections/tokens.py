"""Pi's rough token estimate for one message: a quarter of its characters, rounded up.

Pi uses this estimate to pick a compaction cut point and to size the tail of a context, so
ours must give the same numbers on the same messages. Characters are counted the way
JavaScript's `String.length` counts them (UTF-16 code units: an emoji counts two), and tool
arguments are measured as `JSON.stringify` would print them.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

# Pi prices an image as 4800 characters (1200 tokens), whatever its size.
IMAGE_CHARS = 4800


def estimate_tokens(message: Mapping[str, Any]) -> int:
    """ceil(chars / 4) for the parts of `message` that Pi counts for its role; 0 otherwise."""
    role = message.get("role")
    if role == "user":
        chars = _content_chars(message.get("content"), count_images=False)
    elif role == "assistant":
        chars = _assistant_chars(message.get("content"))
    elif role in ("custom", "toolResult"):
        chars = _content_chars(message.get("content"), count_images=True)
    elif role == "bashExecution":
        chars = js_length(message.get("command")) + js_length(message.get("output"))
    elif role in ("branchSummary", "compactionSummary"):
        chars = js_length(message.get("summary"))
    else:
        return 0
    return math.ceil(chars / 4)


def js_length(value: object) -> int:
    """JavaScript's `.length` of a string (UTF-16 code units); 0 for anything else.

    Pi would fail on a missing string here; counting it as empty keeps a malformed message
    from breaking the whole estimate.
    """
    if not isinstance(value, str):
        return 0
    # "surrogatepass" lets a lone surrogate (valid in a JS string) count as one unit.
    return len(value.encode("utf-16-le", "surrogatepass")) // 2


def _content_chars(content: object, *, count_images: bool) -> int:
    if isinstance(content, str):
        return js_length(content)
    if not isinstance(content, list):
        return 0
    chars = 0
    for block in content:
        if not isinstance(block, Mapping):
            continue
        if block.get("type") == "text" and block.get("text"):
            chars += js_length(block.get("text"))
        if count_images and block.get("type") == "image":
            chars += IMAGE_CHARS
    return chars


def _assistant_chars(content: object) -> int:
    if not isinstance(content, list):
        return 0
    chars = 0
    for block in content:
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "text":
            chars += js_length(block.get("text"))
        elif kind == "thinking":
            chars += js_length(block.get("thinking"))
        elif kind == "toolCall":
            chars += js_length(block.get("name"))
            if "arguments" in block:
                chars += js_length(js_json_stringify(block["arguments"]))
    return chars


def js_json_stringify(value: Any) -> str:
    """The text `JSON.stringify(value)` gives for a JSON value, without indentation.

    It differs from `json.dumps` in two places that change lengths: numbers (JavaScript
    prints 1.0 as "1" and 1e-7 as "1e-7") and lone surrogates (escaped as \\udxxx).
    """
    if isinstance(value, Mapping):
        items = (f"{_js_string(str(k))}:{js_json_stringify(v)}" for k, v in value.items())
        return "{" + ",".join(items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(js_json_stringify(v) for v in value) + "]"
    if isinstance(value, str):
        return _js_string(value)
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return js_number(value)
    return "null"


def _js_string(text: str) -> str:
    quoted = json.dumps(text, ensure_ascii=False)
    return escape_lone_surrogates(quoted)


# One pass in C: this runs on every string of every payload that is built or checked.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def escape_lone_surrogates(text: str) -> str:
    """Write each lone surrogate as a \\uXXXX escape, as JSON.stringify does.

    A Python str holds a valid surrogate pair as one code point, so any surrogate left in
    it is lone, and it could not be encoded as UTF-8.
    """
    if _LONE_SURROGATE.search(text) is None:
        return text
    return _LONE_SURROGATE.sub(lambda found: f"\\u{ord(found.group()):04x}", text)


def js_number(value: float) -> str:
    """JavaScript's Number::toString (non-finite numbers print "null", as in JSON)."""
    try:
        # JavaScript has only doubles: a big int loses precision there too.
        number = float(value)
    except OverflowError:
        return "null"
    if math.isnan(number) or math.isinf(number):
        return "null"
    if number == 0:
        return "0"
    digits, n = _shortest_digits(abs(number))
    sign = "-" if number < 0 else ""
    k = len(digits)
    # Number::toString: value = 0.digits × 10^n; pick plain or exponent notation by n.
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return sign + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * (-n) + digits
    shown = digits[0] + ("." + digits[1:] if k > 1 else "")
    e = n - 1
    return f"{sign}{shown}e{'+' if e >= 0 else '-'}{abs(e)}"


def _shortest_digits(value: float) -> tuple[str, int]:
    """The shortest round-tripping digits of a positive float, and n with
    value = 0.digits × 10^n. repr() picks the same digits as JavaScript."""
    mantissa, _, exponent = repr(value).partition("e")
    whole, _, fraction = mantissa.partition(".")
    all_digits = whole + fraction
    significant = all_digits.lstrip("0")
    leading_zeros = len(all_digits) - len(significant)
    n = len(whole) + int(exponent or 0) - leading_zeros
    return significant.rstrip("0"), n
