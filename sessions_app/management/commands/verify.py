from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from sessions_app import selectors
from sessions_app.management.base import StrandCommand, session_by_id
from sessions_app.selectors import audit
from sessions_app.selectors.verify import verify_session


class Command(StrandCommand):
    help = (
        "Rebuild every stored projection (entries, leaf, counters, request manifests) from the "
        "event log and compare. Exit status 1 names the first difference. With --requests, "
        "rebuild the payload of every model request (of the given sessions) and check its "
        "hash: counts, and the first requests that do not match or cannot be rebuilt."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("session_ids", nargs="*", metavar="SESSION_ID")
        parser.add_argument(
            "--requests",
            action="store_true",
            help="check only the model requests' hashes, and go on past a problem",
        )
        parser.add_argument(
            "--show",
            type=int,
            default=10,
            metavar="N",
            help="with --requests: how many problems to name (default 10)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["session_ids"]:
            sessions = [session_by_id(value) for value in options["session_ids"]]
        elif options["requests"]:
            sessions = []
        else:
            sessions = selectors.sessions_by_age()
        if options["requests"]:
            self._requests([s.id for s in sessions] or None, max(options["show"], 0))
            return
        for session in sessions:
            difference = verify_session(session)
            if difference is not None:
                raise CommandError(f"session {session.id}: {difference}")
        self.stdout.write(f"{len(sessions)} session(s) verified: the projections match the log")

    def _requests(self, session_ids: list[Any] | None, show: int) -> None:
        report = audit.folded_integrity_report(session_ids, keep=show)
        self.stdout.write(
            f"{report.checked} request(s) of {report.sessions} session(s) checked: "
            f"{report.matched} match their hash, {report.mismatched} do not, "
            f"{report.unrebuildable} cannot be rebuilt"
        )
        for problem in report.problems:
            finding = "does not match" if problem.status == "mismatch" else "cannot be rebuilt"
            self.stdout.write(f"  {problem.session_id}#{problem.seq} {finding}: {problem.detail}")
        if not report.ok:
            raise CommandError(
                f"{report.mismatched + report.unrebuildable} request(s) do not rebuild to "
                "their recorded hash"
            )
