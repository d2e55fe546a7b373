"""The text of a message entry as Postgres full-text search sees it.

Kept as one expression so that an index can be built on it (`USING gin
((message_text_vector()))`); the home page's search (`selectors.sessions`) matches it on the
viewer's entries only, in a subquery of its own, so such an index would need the query to
match on the table's rows again.
"""

from __future__ import annotations


def message_text_vector(table: str = "") -> str:
    """The tsvector of a message entry's text; `table` qualifies the column (an alias)."""
    data = f"{table}.data" if table else "data"
    return f"""to_tsvector('english', CASE
    WHEN jsonb_typeof({data}->'message'->'content') = 'string'
    THEN {data}->'message'->'content'
    ELSE jsonb_path_query_array({data}->'message'->'content', '$[*] ? (@.type == "text").text')
END)"""
