"""Attacks run for real: a second user, staff, a revoked token and a signed-out socket.

The personas and API clients are those of the API tests (Alice owns the sessions under
test, Bob is another user, Carol is staff).
"""

from tests.api.conftest import *  # noqa: F403
from tests.api.conftest import _agent_engine, _fast_offline, _stop_runs  # noqa: F401

# (A star import leaves out the autouse fixtures above: the engine that runs turns, fast
# offline streaming, and stopping runs between tests.)
