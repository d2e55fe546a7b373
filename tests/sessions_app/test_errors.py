"""Domain errors: one base with a code, and every code a status in the API."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import sessions_app
from sessions_app import access, store
from sessions_app.errors import DomainError


def _modules() -> list[str]:
    names = [
        info.name
        for info in pkgutil.walk_packages(sessions_app.__path__, "sessions_app.")
        if ".migrations" not in info.name
    ]
    for name in names:
        importlib.import_module(name)
    return names


def _project_errors() -> set[type[BaseException]]:
    """Every exception class defined in `sessions_app` that carries a `code`."""
    found: set[type[BaseException]] = set()
    for name in _modules():
        for _, value in inspect.getmembers(importlib.import_module(name), inspect.isclass):
            if (
                issubclass(value, BaseException)
                and value.__module__.startswith("sessions_app")
                and isinstance(getattr(value, "code", None), str)
            ):
                found.add(value)
    return found


def test_every_error_with_a_code_is_a_domain_error():
    errors = _project_errors()
    assert store.ConcurrencyError in errors and access.NotVisible in errors
    assert {e for e in errors if not issubclass(e, DomainError)} == set()


def test_the_store_errors_are_domain_errors_and_others_are_not_store_errors():
    assert issubclass(store.StoreError, DomainError)
    assert issubclass(store.InvalidEvent, store.StoreError)
    assert not issubclass(access.NotVisible, store.StoreError)


def test_every_domain_error_code_has_an_api_status():
    from sessions_app.api.base import _STATUS_BY_CODE

    codes = {e.code for e in _project_errors()} | {DomainError.code}  # type: ignore[attr-defined]
    assert {c for c in codes if c not in _STATUS_BY_CODE} == set()
