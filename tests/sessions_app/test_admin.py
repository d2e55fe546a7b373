from __future__ import annotations

import pytest

from sessions_app import services, store
from tests.sessions_app.test_store import user_msg


@pytest.mark.django_db
def test_admin_lists_sessions_events_and_entries_with_filters_and_search(admin_client, alice):
    session = services.session_create(owner=alice, title="Searchable title")
    entry_id = store.append_events(session.id, 0, [user_msg("hello")]).entry_ids[0]
    pages = {
        "/admin/sessions_app/session/?q=Searchable": "Searchable title",
        "/admin/sessions_app/event/?type__exact=user%2Fmessage": "user/message",
        "/admin/sessions_app/entry/?q=" + entry_id: entry_id,
    }
    for url, expected in pages.items():
        response = admin_client.get(url)
        assert response.status_code == 200, url
        assert expected in response.content.decode(), url


@pytest.mark.django_db
def test_events_and_entries_are_read_only_in_the_admin(admin_client, alice):
    session = services.session_create(owner=alice)
    store.append_events(session.id, 0, [user_msg("hello")])
    assert admin_client.get("/admin/sessions_app/event/add/").status_code == 403
    assert admin_client.get("/admin/sessions_app/entry/add/").status_code == 403
    listing = admin_client.get("/admin/sessions_app/event/").content.decode()
    assert 'name="action"' not in listing  # no delete action offered
