"""Bounds of the domain that more than one door or service checks, written once.

The API's schemas declare them to clients, the pages and the services check them again;
all read them here, so none of them imports another door for a number.
"""

from __future__ import annotations

# The longest entry id (`Entry.entry_id`, `Session.leaf_entry_id`: 64 characters): an
# imported entry's id and parentId, a leaf, a fork point, an id in a cursor.
ENTRY_ID_MAX = 64

# The largest seq a caller may name (an `after_seq`, a replayed request's seq, a replay
# group): far below bigint's largest, so `seq + 1` and the reads built on it never overflow.
SEQ_MAX = 2**62
