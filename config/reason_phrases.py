"""The reason phrase of every status Strand answers with, in the status line.

Twisted, under daphne, knows no phrase for several statuses Strand answers with (422, 429,
431, among others) and writes `Unknown Status` into the status line of each. The phrases it
lacks are added from Python's own table (`http.HTTPStatus`); those it has stay as they are.
"""

from __future__ import annotations

from http import HTTPStatus


def install() -> None:
    try:
        from twisted.web import http
    except ImportError:  # served by another server, which has its own table
        return
    for status in HTTPStatus:
        http.RESPONSES.setdefault(status.value, status.phrase.encode("ascii"))
