"""Attacks run for real: a second user, staff, a revoked token and a signed-out socket.

The personas and API clients are those of the API tests (Alice owns the sessions under
test, Bob is another user, Carol is staff).
"""

from tests.api.conftest import *  # noqa: F403
