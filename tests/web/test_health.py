"""`GET /healthz` is answered before Django: 200 and a plain "ok", whatever the host."""

from __future__ import annotations

import pytest
from channels.testing import HttpCommunicator

from config.asgi import application


@pytest.mark.asyncio
async def test_the_health_check_answers_before_django() -> None:
    # A host Django would refuse (ALLOWED_HOSTS): the answer comes before its check.
    communicator = HttpCommunicator(
        application, "GET", "/healthz", headers=[(b"host", b"not-an-allowed-host.example")]
    )
    response = await communicator.get_response()
    assert response["status"] == 200
    assert response["body"] == b"ok\n"
    assert (b"cache-control", b"no-store") in response["headers"]


@pytest.mark.asyncio
@pytest.mark.django_db
async def test_other_paths_go_on_to_django() -> None:
    communicator = HttpCommunicator(
        application, "GET", "/healthz/more", headers=[(b"host", b"not-an-allowed-host.example")]
    )
    response = await communicator.get_response()
    assert response["status"] == 400  # Django's refusal of the host
