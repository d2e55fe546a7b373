"""The text of a message entry as Postgres full-text search sees it.

One expression, used both by the index (migration 0005) and by the search query, so that
the planner can match them.
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
