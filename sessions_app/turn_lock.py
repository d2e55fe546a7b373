"""The identity of a session's turn lock: the Postgres advisory lock key of its UUID.

The agent holds the lock for a turn's whole life (`agent.lock`), a leaf move holds it for
its one append (`services`), and a read asks whether anyone holds it
(`selectors.turns.turn_lock_held`): all three derive the key here.
"""

from __future__ import annotations

import hashlib
import struct
import uuid


def turn_lock_key(session_id: uuid.UUID | str) -> int:
    """The advisory lock key of a session: 64 bits of a hash of its UUID, signed."""
    digest = hashlib.blake2b(b"strand-turn:" + uuid.UUID(str(session_id)).bytes, digest_size=8)
    return int(struct.unpack(">q", digest.digest())[0])


def job_lock_key(session_id: uuid.UUID | str, job_id: str) -> int:
    """The advisory lock key of a session's background job: held while the job runs."""
    raw = b"strand-job:" + uuid.UUID(str(session_id)).bytes + job_id.encode()
    digest = hashlib.blake2b(raw, digest_size=8)
    return int(struct.unpack(">q", digest.digest())[0])
