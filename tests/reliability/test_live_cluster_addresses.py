"""Behind the cluster's HAProxy (`deploy/cluster.py`, as `make cluster` runs it), a request
counts under its client's own address: HAProxy forwards it (`option forwardfor`) and the
processes believe that one proxy (`STRAND_TRUSTED_PROXIES=1`), not what a client wrote.

The clients here connect from different loopback addresses (127.0.0.5, 127.0.0.6) to
HAProxy on 127.0.0.1; every connection a process sees comes from HAProxy (127.0.0.1)."""

from __future__ import annotations

import http.client
import re
import shutil
import tempfile
from http.cookies import SimpleCookie
from pathlib import Path
from urllib.parse import urlencode

import pytest

from tests.runtime.conftest import child_database_url

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        shutil.which("haproxy") is None and not Path("/usr/sbin/haproxy").exists(),
        reason="haproxy is not installed (make haproxy-deps)",
    ),
]

FAILURES = 3


def _sign_in(front: int, source: str, password: str, forged: str = "") -> int:
    """A browser at `source` opens the sign-in page through HAProxy and posts the form; the
    status of the post (302: signed in; 200: refused; 429: paused)."""

    def request(
        method: str, body: str = "", headers: dict[str, str] | None = None
    ) -> tuple[int, list[str], str]:
        conn = http.client.HTTPConnection(
            "127.0.0.1", front, timeout=30, source_address=(source, 0)
        )
        try:
            conn.request(method, "/accounts/login/", body=body or None, headers=headers or {})
            response = conn.getresponse()
            text = response.read().decode(errors="replace")
            return response.status, response.headers.get_all("Set-Cookie") or [], text
        finally:
            conn.close()

    status, set_cookies, text = request("GET")
    assert status == 200, status
    cookies: SimpleCookie = SimpleCookie()
    for header in set_cookies:
        cookies.load(header)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', text)
    assert token is not None and "csrftoken" in cookies
    headers = {
        "Content-Type": "application/x-www-form-urlencoded",
        "Cookie": f"csrftoken={cookies['csrftoken'].value}",
    }
    if forged:
        headers["X-Forwarded-For"] = forged
    form = {"csrfmiddlewaretoken": token.group(1), "username": "alice", "password": password}
    return request("POST", urlencode(form), headers)[0]


def test_sign_ins_through_the_clusters_proxy_count_under_each_clients_address(alice) -> None:
    from deploy.cluster import Cluster
    from deploy.daphne import free_port

    front = free_port()
    env = {
        "DATABASE_URL": child_database_url(),
        "STRAND_RECOVER_AT_START": "0",
        "STRAND_SIGNIN_FAILURES": str(FAILURES),
    }
    cluster = Cluster(front, 2, Path(tempfile.mkdtemp(prefix="strand-cluster-")), env)
    cluster.start()
    try:
        # 127.0.0.5 fails, each time claiming to be someone else in its own X-Forwarded-For.
        for n in range(FAILURES):
            _sign_in(front, "127.0.0.5", "wrong", forged=f"192.0.2.{n}")
        # It is paused: its failures counted under its address, whatever it claimed…
        assert _sign_in(front, "127.0.0.5", "alice-pass-1234") == 429
        assert _sign_in(front, "127.0.0.5", "alice-pass-1234", forged="192.0.2.99") == 429
        # …and not under the proxy's, which every connection to the processes comes from.
        assert _sign_in(front, "127.0.0.6", "alice-pass-1234") == 302
    finally:
        cluster.stop()
