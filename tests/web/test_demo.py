from __future__ import annotations

import io

import pytest
from django.contrib.auth import authenticate
from django.contrib.auth.models import User
from django.http import HttpRequest
from django.test import Client, RequestFactory

from sessions_app.models import Session
from sessions_app.services import demo

pytestmark = pytest.mark.django_db


def sign_in() -> HttpRequest:
    """A sign-in request: sign-in throttling needs one to know who is trying."""
    return RequestFactory().post("/accounts/login/")


def test_first_run_makes_the_local_account_with_a_generated_password() -> None:
    out = io.StringIO()
    demo.demo_load(out)
    printed = out.getvalue()
    assert "http://127.0.0.1:8000/" in printed and "user name: local" in printed
    password = printed.split("password:")[1].split()[0]
    assert len(password) >= 12
    assert authenticate(sign_in(), username="local", password=password) is not None
    assert Session.objects.filter(owner__username="local").count() == 2

    again = io.StringIO()
    demo.demo_load(again)
    assert again.getvalue() == ""  # shown once; later runs keep the password
    assert authenticate(sign_in(), username="local", password=password) is not None


def test_the_password_is_new_for_every_installation() -> None:
    first = demo.local_account_ensure(io.StringIO())[1]
    User.objects.filter(username="local").update(password="")
    second = demo.local_account_ensure(io.StringIO())[1]
    assert first and second and first != second


def test_the_address_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRAND_URL", "http://0.0.0.0:9000/")
    out = io.StringIO()
    demo.local_account_ensure(out)
    assert "http://0.0.0.0:9000/" in out.getvalue()


def test_the_local_account_is_the_installs_administrator(client: Client) -> None:
    out = io.StringIO()
    user, password = demo.local_account_ensure(out)
    assert user.is_staff and user.is_superuser
    assert "http://127.0.0.1:8000/admin/" in out.getvalue()
    assert authenticate(sign_in(), username="local", password=password) == user
    client.force_login(user)
    assert client.get("/admin/").status_code == 200
    assert client.get("/admin/sessions_app/requestaudit/").status_code == 200


def test_an_existing_local_account_becomes_the_administrator() -> None:
    User.objects.create_user(username="local", password="an-old-password-1234")
    user, password = demo.local_account_ensure(io.StringIO())
    assert password is None  # the password it had is kept
    user.refresh_from_db()
    assert user.is_staff and user.is_superuser
