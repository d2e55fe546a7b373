from __future__ import annotations

import os

import pytest

# Tests decide when recovery runs; servers they start in-process or as children must not
# close turns behind their back.
os.environ.setdefault("STRAND_RECOVER_AT_START", "0")


@pytest.fixture
def alice(django_user_model):
    return django_user_model.objects.create_user(username="alice", password="alice-pass-1234")


@pytest.fixture
def bob(django_user_model):
    return django_user_model.objects.create_user(username="bob", password="bob-pass-1234")
