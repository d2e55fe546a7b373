"""The agent runtime: the loop, providers, tools, compaction, crash recovery (DESIGN §7).

It imports nothing from Django or `sessions_app`: it reaches the store through the small
protocol in `runtime.ports`, which `sessions_app.agent` implements with Postgres (and the
tests with an in-memory fake). Modules:

- `ports` — the store protocol (append with an expected seq, reads, the turn lock, waiting);
- `service` — `Runtime`: send / steer / follow up, cancel, approvals, compaction,
  navigation with branch summaries, recovery;
- `loop` — `TurnRunner`, one session's turns and steps, each turn opened one way (`Opening`);
- `log_cache` — `LogCache`, the run's fold of the log, and the appends after its last seq;
- `model_request` — `ModelRequest`, one model request with its retries and faults;
- `dispatch` — `ToolDispatch`, a step's tool calls with their approvals;
- `compactor` — `Compactor`, compaction at the run's position (auto, and after an overflow);
- `run` — `Run` (the handle a caller holds, with its cancel) and what a run hands out;
- `providers` — OpenAI-compatible and Anthropic streaming, behind `Provider.stream`;
- `offline` — the deterministic offline model (its grammar is documented there);
- `tools` — read_file, list_files, grep, write_file inside the session's cwd;
- `compaction` — Pi's cut point and kept window, summaries;
- `recovery` — the closers of a turn left open by a dead process;
- `header` — the `request/header` snapshot; `messages` — Pi message shapes; `config` —
  a preset read as `AgentConfig`.
"""

from __future__ import annotations

from runtime.errors import (
    AgentError,
    ApprovalNotPending,
    NotFound,
    NothingToCompact,
    SessionBusy,
    TurnRunning,
)
from runtime.run import Delta, Notice, TurnEnded
from runtime.service import Compacted, Navigated, PendingApproval, Recovery, Runtime, Sent

__all__ = [
    "AgentError",
    "ApprovalNotPending",
    "Compacted",
    "Delta",
    "Navigated",
    "NothingToCompact",
    "NotFound",
    "Notice",
    "PendingApproval",
    "Recovery",
    "Runtime",
    "SessionBusy",
    "Sent",
    "TurnEnded",
    "TurnRunning",
]
