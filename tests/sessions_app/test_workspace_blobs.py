"""The workspace's content store: keyed by (owner, sha256), deduplicated within one owner,
never shared across owners; and the `workspace/snapshot` event it serves."""

from __future__ import annotations

import hashlib

import pytest

from sessions_app import events as vocab
from sessions_app import services, store
from sessions_app.models import WorkspaceBlob
from sessions_app.store import InvalidEvent, NewEvent, StoreError
from sessions_app.store.blobs import blobs_copy, blobs_get, blobs_missing, blobs_put

pytestmark = pytest.mark.django_db


def sha(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def test_a_blob_is_stored_once_per_owner_and_again_for_another(alice, bob) -> None:
    content = b"the same bytes"
    blobs_put(owner_id=alice.pk, blobs={sha(content): content})
    blobs_put(owner_id=alice.pk, blobs={sha(content): content})  # again: nothing changes
    assert WorkspaceBlob.objects.filter(owner=alice).count() == 1
    assert blobs_get(owner_id=bob.pk, shas=[sha(content)]) == {}
    blobs_put(owner_id=bob.pk, blobs={sha(content): content})
    assert WorkspaceBlob.objects.filter(sha256=sha(content)).count() == 2
    assert blobs_get(owner_id=alice.pk, shas=[sha(content)]) == {sha(content): content}


def test_a_blob_whose_bytes_do_not_match_its_name_is_refused(alice) -> None:
    with pytest.raises(StoreError, match="does not hash"):
        blobs_put(owner_id=alice.pk, blobs={sha(b"one"): b"other", sha(b"ok"): b"ok"})
    assert not WorkspaceBlob.objects.exists()  # nothing partly written


def test_a_copy_gives_the_other_owner_rows_of_their_own(alice, bob) -> None:
    content = b"forked"
    blobs_put(owner_id=alice.pk, blobs={sha(content): content})
    assert blobs_missing(owner_id=bob.pk, shas=[sha(content)]) == {sha(content)}
    blobs_copy(from_owner_id=alice.pk, to_owner_id=bob.pk, shas=[sha(content)])
    assert blobs_missing(owner_id=bob.pk, shas=[sha(content)]) == set()
    WorkspaceBlob.objects.filter(owner=alice).delete()
    assert blobs_get(owner_id=bob.pk, shas=[sha(content)]) == {sha(content): content}


def _snapshot(**data: object) -> NewEvent:
    return NewEvent("workspace/snapshot", {"reason": "tool", **data})


def test_a_snapshot_is_appended_with_files_deletions_and_a_checkpoint(alice) -> None:
    session = services.session_create(owner=alice, title="t")
    state = {"sha256": sha(b"x"), "size": 1, "mode": 0o644}
    store.append_events(
        session.id,
        0,
        [
            _snapshot(files={"a/b.txt": state}, deleted=["old.txt"]),
            _snapshot(full=True, files={}, manifest={"a/b.txt": state}),
        ],
    )
    loaded = store.events_after(session.id, 0)
    assert [e.data.get("full", False) for e in loaded] == [False, True]


@pytest.mark.parametrize(
    ("data", "why"),
    [
        ({"files": {"../etc/passwd": {"sha256": "0" * 64, "size": 1}}}, "workspace path"),
        ({"files": {"/abs": {"sha256": "0" * 64, "size": 1}}}, "workspace path"),
        ({"deleted": ["a//b"]}, "workspace path"),
        ({"files": {"a": {"sha256": "nothex", "size": 1}}}, "sha256"),
        ({"full": True}, "manifest"),
        ({"manifest": {}}, "manifest"),
        ({"reason": "because"}, "reason"),
    ],
)
def test_a_bad_snapshot_is_refused_whole(alice, data: dict, why: str) -> None:
    session = services.session_create(owner=alice, title="t")
    with pytest.raises(InvalidEvent, match=why):
        store.append_events(session.id, 0, [_snapshot(**data)])
    assert store.events_after(session.id, 0) == []
    assert "workspace/snapshot" in vocab.EVENT_TYPES
