"""The tables the asynchronous projectors keep (DESIGN §12): their checkpoints, the search
index and the usage rollups. Fields, constraints and indexes only.

Every row names its session without a foreign-key constraint: checking one would take a
KEY SHARE lock on the session row, which the append path locks FOR UPDATE, so a projector's
transaction and an append would wait on each other. The one service that deletes a session
deletes its rows here too.
"""

from __future__ import annotations

from django.contrib.postgres.indexes import GinIndex, OpClass
from django.db import models
from django.db.models import F


class ProjectorCheckpoint(models.Model):
    """How far one projector has read one session's log: every event with a seq up to
    `seq` is in its output, none after. Written in the transaction of that output."""

    projector = models.CharField(max_length=32)
    session = models.ForeignKey(
        "sessions_app.Session", on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    seq = models.BigIntegerField()
    projected_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["projector", "session"], name="projector_checkpoint_session"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.projector} {self.session_id}@{self.seq}"


class SearchDoc(models.Model):
    """One searchable part of an entry (`projections.search_text`): its text as written and
    normalised, and the facts search filters on."""

    session = models.ForeignKey(
        "sessions_app.Session", on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    owner_id = models.IntegerField()
    seq = models.BigIntegerField()
    part = models.SmallIntegerField()
    entry_id = models.CharField(max_length=64)
    role = models.CharField(max_length=32)
    tool_name = models.CharField(max_length=128, blank=True, default="")
    is_error = models.BooleanField(default=False)
    model = models.CharField(max_length=128, blank=True, default="")
    time = models.DateTimeField()
    text = models.TextField()
    norm = models.TextField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "seq", "part"], name="searchdoc_key"),
        ]
        indexes = [
            # Substrings of any language, phrases and prefixes: trigrams of the normalised text.
            GinIndex(OpClass("norm", name="gin_trgm_ops"), name="searchdoc_norm_trgm"),
            # Newest first, for one owner and for staff (the results' order and cursor).
            models.Index(
                "owner_id",
                F("time").desc(),
                F("session").desc(),
                F("seq").desc(),
                F("part").desc(),
                name="searchdoc_owner_order",
            ),
            models.Index(
                F("time").desc(),
                F("session").desc(),
                F("seq").desc(),
                F("part").desc(),
                name="searchdoc_order",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.session_id}#{self.seq}.{self.part} {self.role}"


class UsageCount(models.Model):
    """One number of the usage rollups: a `metric` summed over the events of one session on
    one day (the server's time zone) under one provider and model, optionally per `label`
    (the tool of a tool call, the kind of a fault, the bucket of a latency histogram).

    The Usage pages sum these rows, so a page costs the same at 1 or 1,000,000 sessions."""

    owner_id = models.IntegerField()
    day = models.DateField()
    session = models.ForeignKey(
        "sessions_app.Session", on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    provider = models.CharField(max_length=128, blank=True, default="")
    model = models.CharField(max_length=128, blank=True, default="")
    metric = models.CharField(max_length=32)
    label = models.CharField(max_length=128, blank=True, default="")
    value = models.DecimalField(max_digits=24, decimal_places=8)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["owner_id", "day", "session", "provider", "model", "metric", "label"],
                name="usagecount_key",
            ),
        ]
        indexes = [
            models.Index(fields=["day", "owner_id"], name="usagecount_day_owner"),
            models.Index(fields=["session"], name="usagecount_session"),
        ]

    def __str__(self) -> str:
        return f"{self.owner_id} {self.day} {self.metric}[{self.label}] = {self.value}"
