from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandError, CommandParser

from sessions_app import agent
from sessions_app.management.base import StrandCommand, session_by_id
from sessions_app.presets import preset_name_of
from sessions_app.services import replay


class Command(StrandCommand):
    help = (
        "Replay a recorded model request (the seq of its request/sent) in the foreground: "
        "once per --preset (default: the session's), --count times over; each answer is a "
        "new sibling branch. Exit status 0 when every replay completed; otherwise 1 with "
        "one line saying why. Tools that need approval wait for a decision made elsewhere."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("session_id")
        parser.add_argument("seq", type=int, help="the seq of the request/sent to replay")
        parser.add_argument("--preset", action="append", default=[], help="a preset name")
        parser.add_argument("--count", type=int, default=1)
        parser.add_argument("--system-prompt", default=None)
        parser.add_argument(
            "--params", default=None, help='parameter overrides as JSON: {"temperature": 0.2}'
        )
        parser.add_argument("--thinking-level", default=None)

    def handle(self, *args: Any, **options: Any) -> None:
        session = session_by_id(options["session_id"])
        try:
            params = json.loads(options["params"]) if options["params"] else {}
        except ValueError as exc:
            raise CommandError(f"--params is not JSON: {exc}") from None
        if not isinstance(params, dict):
            raise CommandError("--params must be a JSON object")
        plans = replay.replay_plans(
            preset_names=options["preset"] or [preset_name_of(session.preset)],
            count=options["count"],
            system_prompt=options["system_prompt"],
            params=params,
            thinking_level=options["thinking_level"],
        )
        try:
            try:
                started = replay.replay_start(session, options["seq"], plans)
            except LookupError as exc:  # no request/sent at that seq
                raise CommandError(str(exc)) from None
            self.stdout.write(f"replay group {started.group}: turns {list(started.turns)}")
            ended = agent.agent_wait(session.id) or []
        finally:
            agent.agent_shutdown()
        failed = [e for e in ended if e.reason != "completed"]
        if len(ended) < len(started.turns) or failed:
            first = failed[0] if failed else None
            why = f"turn {first.turn} ended {first.reason}" if first else "not every replay ran"
            raise CommandError(why)
