from __future__ import annotations

import signal
import sys
from types import FrameType
from typing import Any

from django.core.management.base import CommandError, CommandParser

from runtime import Delta, Notice
from sessions_app import agent
from sessions_app.management.base import StrandCommand, session_by_id


class Command(StrandCommand):
    help = (
        "Run one turn of a session in the foreground and print the reply as it streams. "
        "Exit status 0 when the turn completed; otherwise 1 with one line saying why."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("session_id")
        parser.add_argument("text")
        parser.add_argument(
            "--auto-approve",
            action="store_true",
            help="allow every tool call that needs approval (otherwise wait for a decision "
            "made elsewhere, in the UI or the API)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        session = session_by_id(options["session_id"])
        out = self.stdout
        last: list[tuple[int, int]] = []  # (turn, step) of the text printed last
        ends_line = [True]

        def on_delta(delta: Delta) -> None:
            if delta.kind != "text" or not delta.text:
                return
            if last and last[-1] != (delta.turn, delta.step) and not ends_line[0]:
                out.write("")  # each reply on lines of its own
            last[:] = [(delta.turn, delta.step)]
            out.write(delta.text, ending="")
            out.flush()
            ends_line[0] = delta.text.endswith("\n")

        def on_notice(notice: Notice) -> None:
            if notice.kind == "approval_waiting":
                sys.stderr.write(notice.text + "\n")
                sys.stderr.flush()

        # A polite kill (SIGTERM) stops the turn the way Ctrl-C does.
        signal.signal(signal.SIGTERM, _interrupt)
        try:
            try:
                ended = agent.agent_run_foreground(
                    session.id,
                    options["text"],
                    auto_approve=options["auto_approve"],
                    on_delta=on_delta,
                    on_notice=on_notice,
                )
            except KeyboardInterrupt:
                # Ctrl-C cancels the turn; the run still records how it ended.
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                agent.agent_cancel(session.id)
                ended = agent.agent_wait(session.id, timeout=30) or []
        finally:
            if not ends_line[0]:
                out.write("")
            agent.agent_shutdown()
        if not ended:
            raise CommandError("the turn did not run")
        first = ended[0]
        if first.reason != "completed":
            detail = f": {first.error}" if first.error else ""
            raise CommandError(f"turn {first.turn} ended {first.reason}{detail}")


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt
