"""The API's schema names each operation by its endpoint, whichever router module holds it."""

from __future__ import annotations

from sessions_app.api import api


def test_operation_ids_name_the_endpoint_alone():
    schema = api.get_openapi_schema(path_prefix="/api/")
    ids = [op["operationId"] for ops in schema["paths"].values() for op in ops.values()]
    assert len(ids) == len(set(ids))
    for endpoint in ("me", "session_create", "pi_import", "tree_get", "chat_view"):
        assert f"sessions_app_api_{endpoint}" in ids
    assert {"sessions_app_api_message_send", "sessions_app_api_pi_export"} <= set(ids)
