"""Session, Event, Entry (DESIGN §2). Fields, constraints and indexes only: nothing here writes.

Events and entries are written by `sessions_app.store` alone, and a trigger (migration 0002)
refuses UPDATE and DELETE on both tables.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import F

# `Session.origin` of a session that records another agent's OpenTelemetry spans.
OBSERVED = "observed"


class Session(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="strand_sessions"
    )
    title = models.CharField(max_length=500, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    # Last time an event was appended: the session list sorts by it.
    updated_at = models.DateTimeField(auto_now_add=True)
    cwd = models.CharField(max_length=4096, blank=True, default="")
    # Agent preset: provider, model, system prompt, tool set, thinking level.
    preset = models.JSONField(default=dict, blank=True)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="forks"
    )
    fork_point = models.CharField(max_length=64, blank=True, default="")
    # "subagent" for a child session a parent's `task` call started (its parent is
    # `parent`, and `delegation_depth` counts the parents above it); "observed" for one that
    # records another agent's OpenTelemetry spans (nothing runs in it); "" otherwise.
    origin = models.CharField(max_length=16, blank=True, default="")
    delegation_depth = models.PositiveSmallIntegerField(default=0)
    # Seq of the newest event, -1 when the log is empty. Its row is the append lock.
    last_seq = models.BigIntegerField(default=-1)
    leaf_entry_id = models.CharField(max_length=64, null=True, blank=True)
    format_version = models.PositiveSmallIntegerField(default=3)
    # Counters kept by the append path for the session list.
    message_count = models.IntegerField(default=0)
    token_count = models.BigIntegerField(default=0)
    # Bytes of JSON its events and entries hold, as the append path measured them: what
    # deleting the session gives back to its owner's StorageUsage.
    stored_bytes = models.BigIntegerField(default=0)

    class Meta:
        ordering = ["-updated_at"]
        # No index on updated_at: every append updates it, and an indexed column would make
        # each of those updates write to every index of the table (no HOT update).
        indexes = [
            models.Index(
                fields=["parent"],
                name="session_subagent_parent",
                condition=models.Q(origin="subagent"),
            ),
        ]

    def __str__(self) -> str:
        return self.title or f"Session {str(self.id)[:8]}"


class Event(models.Model):
    """One fact of a session's append-only log, keyed by (session, seq).

    The unique (session, seq) key is the concurrency check. The surrogate `id` exists only
    because Django 5.2's admin cannot register a model with a composite primary key; nothing
    pages or joins by it (concurrent commits land out of id order).
    """

    # No index of its own: the (session, seq) key serves every read of one session.
    session = models.ForeignKey(
        Session, on_delete=models.DO_NOTHING, related_name="events", db_index=False
    )
    seq = models.BigIntegerField()
    type = models.CharField(max_length=64)
    schema_version = models.PositiveSmallIntegerField(default=1)
    time = models.DateTimeField()
    data = models.JSONField()
    entry_id = models.CharField(max_length=64, null=True, blank=True)
    turn = models.IntegerField(null=True, blank=True)
    step = models.IntegerField(null=True, blank=True)
    ignorable = models.BooleanField(default=False)

    class Meta:
        ordering = ["session", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["session", "seq"], name="event_session_seq"),
        ]
        indexes = [
            models.Index(fields=["type", "time"], name="event_type_time"),
            # The events of given turns (a trace window, a request's turn).
            models.Index(fields=["session", "turn"], name="event_session_turn"),
            # A session's turns and its model requests, without reading its other events.
            models.Index(
                fields=["session", "turn"],
                name="event_session_turn_start",
                condition=models.Q(type="turn/start"),
            ),
            models.Index(
                fields=["session", "seq"],
                name="event_session_request",
                condition=models.Q(type="request/sent"),
            ),
            # A session's workspace snapshots newest first: the fold at an entry reads its
            # checkpoint and the tail after it from here (selectors.workspace).
            models.Index(
                fields=["session", "seq"],
                name="event_snapshot_seq",
                condition=models.Q(type="workspace/snapshot"),
            ),
            models.Index(
                fields=["session", "seq"],
                name="event_checkpoint_seq",
                condition=models.Q(type="workspace/snapshot", data__full=True),
            ),
            # A session's background jobs (their starts and ends), read by the job tools and
            # recovery without reading its other events.
            models.Index(
                fields=["session", "seq"],
                name="event_job_seq",
                condition=models.Q(type__in=["job/started", "job/ended"]),
            ),
            # The header in force: rare, so often far back in a long session's log.
            models.Index(
                fields=["session", "seq"],
                name="event_session_header",
                condition=models.Q(type="request/header"),
            ),
            # The request audit, newest first (its list's order): a page of it is read from
            # here, not sorted out of every request.
            models.Index(
                F("time").desc(),
                "session",
                F("seq").desc(),
                name="event_request_audit_order",
                condition=models.Q(type__in=["request/header", "request/sent"]),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.session_id}#{self.seq} {self.type}"


class Entry(models.Model):
    """One node of the conversation tree, Pi-compatible; a projection of the event log."""

    # No index of its own: the (session, entry_id) and (session, seq) keys serve every read.
    session = models.ForeignKey(
        Session, on_delete=models.DO_NOTHING, related_name="entries", db_index=False
    )
    # Pi's id (8 hex chars for entries Pi made); unique within a session.
    entry_id = models.CharField(max_length=64)
    parent_id = models.CharField(max_length=64, null=True, blank=True)
    type = models.CharField(max_length=32)
    # The entry exactly as Pi writes it to its file.
    data = models.JSONField()
    timestamp = models.CharField(max_length=64)
    seq = models.BigIntegerField()
    depth = models.IntegerField()
    # Path facts, set once when the entry is added: the nearest compaction, thinking-level
    # change and model-setting entry (model_change or assistant message) on the path from
    # the root to this entry, itself included. They let the context of a leaf be built
    # from its kept window alone, without walking the whole path.
    path_compaction = models.CharField(max_length=64, null=True, blank=True)
    path_thinking = models.CharField(max_length=64, null=True, blank=True)
    path_model = models.CharField(max_length=64, null=True, blank=True)

    class Meta:
        ordering = ["session", "seq"]
        verbose_name_plural = "entries"
        constraints = [
            models.UniqueConstraint(fields=["session", "entry_id"], name="entry_session_id"),
        ]
        indexes = [
            # A parent's children in seq order: the tree reads a window of a wide fan as a
            # range of this index.
            models.Index(fields=["session", "parent_id", "seq"], name="entry_session_parent_seq"),
            models.Index(fields=["session", "seq"], name="entry_session_seq"),
        ]

    def __str__(self) -> str:
        return f"{self.session_id}/{self.entry_id} {self.type}"


class StorageUsage(models.Model):
    """Bytes of JSON a user's sessions hold (events and entries), kept by the append path in
    the transaction of each append and given back when a session is deleted: the storage
    quota (`STRAND_USER_QUOTA_BYTES`) is checked against it without summing any log."""

    owner = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        primary_key=True,
        related_name="strand_storage",
    )
    stored_bytes = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.owner_id}: {self.stored_bytes} bytes"


class SessionDeletion(models.Model):
    """Audit row written by the one service that deletes a whole session."""

    session_id = models.UUIDField()
    title = models.CharField(max_length=500, blank=True, default="")
    owner_username = models.CharField(max_length=150)
    deleted_by = models.CharField(max_length=150)
    deleted_at = models.DateTimeField(auto_now_add=True)
    event_count = models.BigIntegerField()

    class Meta:
        ordering = ["-deleted_at"]

    def __str__(self) -> str:
        return f"{self.session_id} deleted by {self.deleted_by}"


class ApiToken(models.Model):
    """A personal API token (`Authorization: Bearer …`). Only a digest of the token is kept:
    the token itself is shown once, when it is made (`sessions_app.services.tokens`)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="strand_tokens"
    )
    name = models.CharField(max_length=100)
    # The token's first characters, shown in lists so that people can tell tokens apart.
    prefix = models.CharField(max_length=16)
    # sha256 of the whole token, hex. Tokens are 256 random bits, so a fast hash is enough.
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


class RateCounter(models.Model):
    """Fixed-window rate limit counters, one row per (user, scope, window start); a user's
    window opens at their first hit in the scope.

    Kept in Postgres so that every server process counts against the same limit; rows of
    ended windows are deleted as new windows open (`sessions_app.services.ratelimit`)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    scope = models.CharField(max_length=32)
    window_start = models.DateTimeField()
    count = models.IntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["user", "scope", "window_start"], name="ratecounter_user_scope_window"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user_id} {self.scope} @ {self.window_start}: {self.count}"


class RequestAudit(models.Model):
    """One model request for the admin audit: a `request/header` or a `request/sent` event,
    with the owner, provider and model it ran under (a `request/sent` takes them from the
    header it names). A read-only database view over the event log (migration 0004)."""

    # The event's own id (the view's key; nothing pages by it).
    id = models.BigIntegerField(primary_key=True)
    session = models.ForeignKey(Session, on_delete=models.DO_NOTHING, related_name="+")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.DO_NOTHING, related_name="+"
    )
    seq = models.BigIntegerField()
    type = models.CharField(max_length=64)
    time = models.DateTimeField()
    turn = models.IntegerField(null=True)
    step = models.IntegerField(null=True)
    header_seq = models.BigIntegerField(null=True)
    provider = models.TextField()
    model = models.TextField()
    token_estimate = models.BigIntegerField(null=True)

    class Meta:
        managed = False
        db_table = "strand_request_audit"
        ordering = ["-time", "session", "-seq"]
        verbose_name = "model request"
        verbose_name_plural = "model requests (audit)"

    def __str__(self) -> str:
        return f"{self.session_id}#{self.seq} {self.type}"


class WorkspaceBlob(models.Model):
    """The content of one workspace file, addressed by its SHA-256 (DESIGN §11).

    Deduplicated within one owner: every session of theirs that holds the same bytes names
    the same row. Never shared across owners, so nothing about one user's files (not even
    that some content exists) can be learnt through another's. Rows are written before the
    `workspace/snapshot` that names them (idempotently: an existing row is kept)."""

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="strand_blobs"
    )
    sha256 = models.CharField(max_length=64)
    size = models.BigIntegerField()
    content = models.BinaryField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["owner", "sha256"], name="workspace_blob_owner_sha"),
            models.CheckConstraint(
                condition=models.Q(sha256__regex=r"^[0-9a-f]{64}$"), name="workspace_blob_sha"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.owner_id}:{self.sha256[:12]} ({self.size} bytes)"


class ShareLink(models.Model):
    """A read-only link to a session, or to one branch of it, for someone without an account
    (`sessions_app.services.shares`). Only a digest of its token is kept, as for `ApiToken`:
    the URL that carries the token is shown once, when the link is made."""

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="share_links")
    # A leaf entry: the guest sees the path from the root to it and nothing off it. Empty:
    # the whole session, following its current leaf.
    branch = models.CharField(max_length=64, blank=True, default="")
    # sha256 of the token, hex. Tokens are 256 random bits, so a fast hash is enough.
    digest = models.CharField(max_length=64, unique=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    # What the guest sees as "[redacted: …]" instead of the text.
    redact_tool_outputs = models.BooleanField(default=False)
    redact_file_contents = models.BooleanField(default=False)
    redact_system_prompt = models.BooleanField(default=False)
    # The owner's regular expressions (RE2 syntax), checked and bounded when the link is made.
    redact_patterns = models.JSONField(default=list, blank=True)
    view_count = models.BigIntegerField(default=0)

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["session", "created_at"], name="sharelink_session")]

    def __str__(self) -> str:
        return f"share of {self.session_id} #{self.pk}"


class KeyRateCounter(models.Model):
    """Fixed-window rate limit counters for callers without an account (a share link, a
    client address), as `RateCounter` is for users (`services.ratelimit`). Only live windows'
    rows are kept: the first hit of a new window deletes every ended one of its scope."""

    key = models.CharField(max_length=100)
    scope = models.CharField(max_length=32)
    window_start = models.DateTimeField()
    count = models.IntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["key", "scope", "window_start"], name="keyratecounter_key_scope_window"
            ),
        ]
        # Past windows are deleted by scope and age, whatever their key.
        indexes = [models.Index(fields=["scope", "window_start"], name="keyratecounter_age")]

    def __str__(self) -> str:
        return f"{self.key} {self.scope} @ {self.window_start}: {self.count}"


from sessions_app.projectors.models import ProjectorCheckpoint, SearchDoc, UsageCount  # noqa: E402,F401


class ObservedConversation(models.Model):
    """A conversation an owner's agent sends as OpenTelemetry GenAI spans (`POST /v1/traces`)
    and the observed session it is recorded in. The key (`conversation:<gen_ai.conversation.id>`
    or `trace:<trace id>`) is per owner: another user's spans with the same conversation id
    make a session of their own. `state` is what the next spans are planned from
    (`projections.otel_ingest.IngestState`); its row is locked while they are recorded."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    key = models.CharField(max_length=220)
    session = models.OneToOneField(Session, on_delete=models.CASCADE, related_name="+")
    state = models.JSONField(default=dict)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["owner", "key"], name="observed_owner_key"),
        ]

    def __str__(self) -> str:
        return f"{self.owner_id} {self.key}"


class ObservedSpan(models.Model):
    """A span recorded in an observed session: the same span sent again is recorded once."""

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="+")
    trace_id = models.CharField(max_length=32)
    span_id = models.CharField(max_length=16)
    # The seq of the first fact the span added (0 when it added none of its own).
    seq = models.BigIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["session", "trace_id", "span_id"], name="observed_span_once"
            ),
        ]
        indexes = [models.Index(fields=["trace_id"], name="observed_span_trace")]

    def __str__(self) -> str:
        return f"{self.session_id} {self.trace_id}/{self.span_id}"
