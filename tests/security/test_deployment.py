"""Deployment settings from the environment.

- `manage.py check --deploy` reports no issue with the production variables of the README
  (the block is read from README.md itself), and does report them without STRAND_HTTPS.
- A daphne process started with those variables, behind a proxy that ends TLS: plain HTTP
  is redirected, HTTPS requests get HSTS, and the sign-in cookies are Secure.
- The secret key file is private from the moment it exists, and processes that start at
  once agree on one key.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from django.core.exceptions import ImproperlyConfigured

from config.settings import _local_secret_key, _proxy_ssl_header
from deploy import daphne
from deploy.daphne import free_port
from tests.runtime.conftest import child_database_url

ROOT = Path(__file__).resolve().parents[2]
HOST = "strand.example.com"
# Settings the production block may name; removed from the test run's own environment so
# that only the block decides them.
DEPLOYMENT_VARIABLES = {
    "DEBUG",
    "SECRET_KEY",
    "ALLOWED_HOSTS",
    "CSRF_TRUSTED_ORIGINS",
    "STRAND_HTTPS",
    "SECURE_PROXY_SSL_HEADER",
    "SESSION_COOKIE_SECURE",
    "CSRF_COOKIE_SECURE",
    "SECURE_SSL_REDIRECT",
    "SECURE_HSTS_SECONDS",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS",
    "SECURE_HSTS_PRELOAD",
    "REDIS_URL",
}


def readme_production_variables() -> dict[str, str]:
    """The `# strand.env` block of README.md, as a mapping."""
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```sh\n# strand\.env\n(.*?)```", readme, re.S)
    assert block, "README.md has no `# strand.env` block of production variables"
    variables: dict[str, str] = {}
    for line in block.group(1).splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, equals, value = line.partition("=")
            assert equals, f"not NAME=value: {line!r}"
            variables[name.strip()] = value
    return variables


def production_env(tmp_path: Path, database_url: str, **changes: str | None) -> dict[str, str]:
    """The process environment with the README's variables, pointed at this test's database
    and folders; the SECRET_KEY placeholder becomes a real random key."""
    env = {k: v for k, v in os.environ.items() if k not in DEPLOYMENT_VARIABLES}
    env.update(readme_production_variables())
    env.update(
        DATABASE_URL=database_url,
        SECRET_KEY=secrets.token_urlsafe(50),
        STRAND_STATE_DIR=str(tmp_path / "state"),
        STRAND_WORKSPACE_ROOTS=str(tmp_path / "workspaces"),
    )
    env.pop("REDIS_URL", None)  # one process here; the channel layer is not under test
    for name, value in changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def check_deploy(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


# --- check --deploy --------------------------------------------------------------------


def test_check_deploy_passes_with_the_readme_production_variables(tmp_path: Path) -> None:
    result = check_deploy(production_env(tmp_path, os.environ["DATABASE_URL"]))
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "System check identified no issues" in result.stdout, output
    assert "WARNING" not in output, output


def test_check_deploy_warns_when_https_is_not_switched_on(tmp_path: Path) -> None:
    result = check_deploy(production_env(tmp_path, os.environ["DATABASE_URL"], STRAND_HTTPS=None))
    output = result.stdout + result.stderr
    assert result.returncode != 0
    for check in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert check in output, output


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("", None),
        ("X-Forwarded-Proto,https", ("HTTP_X_FORWARDED_PROTO", "https")),
        ("HTTP_X_FORWARDED_PROTO,https", ("HTTP_X_FORWARDED_PROTO", "https")),
        (" x-forwarded-ssl , on ", ("HTTP_X_FORWARDED_SSL", "on")),
    ],
)
def test_the_proxy_header_is_read_in_either_spelling(
    value: str, parsed: tuple[str, str] | None
) -> None:
    assert _proxy_ssl_header(value) == parsed


@pytest.mark.parametrize("value", ["X-Forwarded-Proto", "X-Forwarded-Proto,", ",https"])
def test_a_malformed_proxy_header_stops_the_start(value: str) -> None:
    with pytest.raises(ImproperlyConfigured, match="X-Forwarded-Proto,https"):
        _proxy_ssl_header(value)


# --- a server with the production variables, behind a proxy that ends TLS --------------


@pytest.fixture
def production_server(tmp_path: Path, transactional_db: Any) -> Iterator[str]:
    port = free_port()
    log = (tmp_path / "daphne.log").open("wb")
    env = production_env(tmp_path, child_database_url())
    process = daphne.start(port, env, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        daphne.stop(process)
        log.close()


def test_behind_a_tls_proxy_cookies_are_secure_and_hsts_is_sent(
    production_server: str, alice: Any
) -> None:
    proxied = {"Host": HOST, "X-Forwarded-Proto": "https"}

    plain = requests.get(
        production_server + "/accounts/login/", headers={"Host": HOST}, allow_redirects=False
    )
    assert plain.status_code == 301
    assert plain.headers["Location"] == f"https://{HOST}/accounts/login/"

    form = requests.get(production_server + "/accounts/login/", headers=proxied)
    assert form.status_code == 200
    assert form.headers["Strict-Transport-Security"] == (
        "max-age=31536000; includeSubDomains; preload"
    )
    assert "Content-Security-Policy" in form.headers
    csrf = next(c for c in form.cookies if c.name == "csrftoken")
    assert csrf.secure
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
    assert token

    # The browser's view: an HTTPS page of the public origin posts the form.
    signed_in = requests.post(
        production_server + "/accounts/login/",
        headers={
            **proxied,
            "Origin": f"https://{HOST}",
            "Referer": f"https://{HOST}/accounts/login/",
            "Cookie": f"csrftoken={csrf.value}",
        },
        data={
            "username": "alice",
            "password": "alice-pass-1234",
            "csrfmiddlewaretoken": token.group(1),
        },
        allow_redirects=False,
    )
    assert signed_in.status_code == 302, signed_in.text[:2000]
    session_cookie = next(c for c in signed_in.cookies if c.name == "sessionid")
    assert session_cookie.secure and session_cookie.has_nonstandard_attr("HttpOnly")


def test_a_form_from_another_origin_is_refused_behind_the_proxy(
    production_server: str,
) -> None:
    proxied = {"Host": HOST, "X-Forwarded-Proto": "https"}
    form = requests.get(production_server + "/accounts/login/", headers=proxied)
    csrf = next(c for c in form.cookies if c.name == "csrftoken")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
    assert token
    refused = requests.post(
        production_server + "/accounts/login/",
        headers={
            **proxied,
            "Origin": "https://evil.example.net",
            "Cookie": f"csrftoken={csrf.value}",
        },
        data={"username": "x", "password": "y", "csrfmiddlewaretoken": token.group(1)},
        allow_redirects=False,
    )
    assert refused.status_code == 403


# --- the secret key file ---------------------------------------------------------------


def test_the_secret_key_file_is_private_from_its_creation(tmp_path: Path) -> None:
    path = tmp_path / "state" / "secret_key"
    old_umask = os.umask(0)  # a umask that would leave a plainly created file world-readable
    try:
        key = _local_secret_key(path)
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(key) >= 50 and path.read_text() == key
    assert _local_secret_key(path) == key  # kept across restarts
    assert [p.name for p in path.parent.iterdir()] == ["secret_key"]  # no draft left behind


def test_a_key_file_left_readable_by_an_earlier_version_is_narrowed(tmp_path: Path) -> None:
    path = tmp_path / "secret_key"
    path.write_text("k" * 60)
    path.chmod(0o644)
    assert _local_secret_key(path) == "k" * 60
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_an_empty_key_file_is_reported_not_used(tmp_path: Path) -> None:
    path = tmp_path / "secret_key"
    path.touch(mode=0o600)
    with pytest.raises(ImproperlyConfigured, match="delete it"):
        _local_secret_key(path)


# Each racer imports the settings, says it is ready, and waits for the start signal.
RACER = """
import os, sys, time
from pathlib import Path
from config.settings import _local_secret_key
key, go, ready = (Path(arg) for arg in sys.argv[1:4])
ready.touch()
while not go.exists():
    time.sleep(0.001)
print(_local_secret_key(key))
"""


def test_processes_starting_at_once_agree_on_one_key(tmp_path: Path) -> None:
    path = tmp_path / "state" / "secret_key"
    go = tmp_path / "go"
    env = {
        **os.environ,
        "DATABASE_URL": "postgres://unused@127.0.0.1/unused",  # settings are only read
        "SECRET_KEY": "x" * 50,  # the settings' own key; the racers make `path`
    }
    ready = tmp_path / "ready"
    ready.mkdir()
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(path), str(go), str(ready / str(n))],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(8)
    ]
    deadline = time.monotonic() + 60
    while len(list(ready.iterdir())) < len(racers):
        assert time.monotonic() < deadline, "the racers did not start"
        assert all(racer.poll() is None for racer in racers), "a racer failed to start"
        time.sleep(0.01)
    go.touch()
    outputs = [racer.communicate(timeout=60) for racer in racers]
    assert all(racer.returncode == 0 for racer in racers), [err for _, err in outputs]
    keys = {out.strip() for out, _ in outputs}
    assert keys == {path.read_text()}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["secret_key"]
