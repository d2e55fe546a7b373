"""The text of a message entry as Postgres full-text search sees it.

Kept as one expression so that an index built on it (`USING gin ((message_text_vector()))`)
would be used by the search query as it stands.
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
