"""Settings, read from the environment (12-factor).

DATABASE_URL  postgres://user:pass@host:port/name (unset: the embedded Postgres)
REDIS_URL     redis://host:port/0 for the channel layer (unset: in-memory, one process)
SECRET_KEY, DEBUG, ALLOWED_HOSTS (comma-separated)
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

BASE_DIR = Path(__file__).resolve().parent.parent
STATE_DIR = Path(os.environ.get("STRAND_STATE_DIR", BASE_DIR / ".strand"))


def _env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def _secret_key() -> str:
    if key := os.environ.get("SECRET_KEY"):
        return key
    # A local, generated key that survives restarts (sign-in cookies stay valid).
    return _local_secret_key(STATE_DIR / "secret_key")


def _local_secret_key(path: Path) -> str:
    """The key kept in `path`, generated on first use; only its owner can ever read it.

    The key is written to a new file created with mode 0600 (O_EXCL: never an existing
    file, never a moment with wider permissions) and then linked to `path`. A link fails if
    `path` exists, so when several processes start at once exactly one key wins, and no
    process reads a half-written file.
    """
    if not path.exists():
        import contextlib
        import secrets

        path.parent.mkdir(parents=True, exist_ok=True)
        draft = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(8)}")
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as out:
                out.write(secrets.token_urlsafe(50))
                out.flush()
                os.fsync(out.fileno())
            # If another process started at the same moment and linked first, its key is the key.
            with contextlib.suppress(FileExistsError):
                os.link(draft, path)
        finally:
            draft.unlink(missing_ok=True)
    # Earlier versions wrote the file first and narrowed it after: narrow any such file.
    if path.stat().st_mode & 0o077:
        path.chmod(0o600)
    key = path.read_text().strip()
    if not key:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(f"{path} is empty; delete it and a new key is generated")
    return key


def _database_from_url(url: str) -> dict[str, object]:
    parts = urlparse(url)
    if parts.scheme not in {"postgres", "postgresql"}:
        raise ValueError(f"DATABASE_URL must be a postgres:// URL, got scheme {parts.scheme!r}")
    query = parse_qs(parts.query)
    host = unquote(parts.hostname or "") or query.get("host", [""])[0]
    name = unquote(parts.path.lstrip("/")) or "postgres"
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "USER": unquote(parts.username or "") or "postgres",
        "PASSWORD": unquote(parts.password or ""),
        "HOST": host,
        "PORT": str(parts.port or query.get("port", [""])[0] or ""),
        "CONN_MAX_AGE": 0,
        # The live-server test case renames NAME itself; spelling TEST out avoids test_test_.
        "TEST": {"NAME": f"test_{name}"},
    }


def _database_url() -> str:
    if url := os.environ.get("DATABASE_URL"):
        return url
    from config.embedded_pg import embedded_database_url

    url = embedded_database_url(STATE_DIR / "pgdata")
    # Children (daphne in tests, management commands) reuse the running server.
    os.environ["DATABASE_URL"] = url
    return url


SECRET_KEY = _secret_key()
DEBUG = _env_bool("DEBUG", False)
ALLOWED_HOSTS = [
    h.strip()
    for h in os.environ.get("ALLOWED_HOSTS", "127.0.0.1,localhost").split(",")
    if h.strip()
]

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "template_partials",
    "channels",
    # Serves the API docs' assets itself (no CDN: Strand works without a network).
    "ninja",
    "sessions_app",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    # After the CSRF check: a NUL or a lone surrogate in any input is a 400 before any view.
    "sessions_app.bad_input.RefuseUnstorableInput",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "config.urls"
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    }
]

DATABASES = {"default": _database_from_url(_database_url())}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

if redis_url := os.environ.get("REDIS_URL"):
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [redis_url]},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = STATE_DIR / "static"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "loggers": {
        "django.request": {"handlers": ["stderr"], "level": "ERROR"},
        "strand": {"handlers": ["stderr"], "level": os.environ.get("STRAND_LOG_LEVEL", "INFO")},
    },
}

# --- Deployment: HTTPS and the Content-Security-Policy ------------------------------------
#
# `make run` serves plain HTTP on 127.0.0.1, so the HTTPS settings default off. STRAND_HTTPS=1
# (the site is reached over HTTPS, directly or through a proxy that ends TLS) turns them all
# on; each can still be set on its own, by Django's name. With the variables the README
# lists, `manage.py check --deploy` reports no issue (tests/security/test_deployment.py).


def _env_list(name: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, "").split(",") if item.strip()]


def _proxy_ssl_header(value: str) -> tuple[str, str] | None:
    """`X-Forwarded-Proto,https` (or Django's `HTTP_X_FORWARDED_PROTO,https`): the header a
    proxy that ends TLS sets, and its value for HTTPS requests."""
    if not value.strip():
        return None
    header, comma, expected = (part.strip() for part in value.partition(","))
    if not comma or not header or not expected:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(
            f"SECURE_PROXY_SSL_HEADER must be HEADER,VALUE like X-Forwarded-Proto,https; got {value!r}"
        )
    meta = header.upper().replace("-", "_")
    return (meta if meta.startswith("HTTP_") else f"HTTP_{meta}"), expected


STRAND_HTTPS = _env_bool("STRAND_HTTPS", False)
SESSION_COOKIE_SECURE = _env_bool("SESSION_COOKIE_SECURE", STRAND_HTTPS)
CSRF_COOKIE_SECURE = _env_bool("CSRF_COOKIE_SECURE", STRAND_HTTPS)
SECURE_SSL_REDIRECT = _env_bool("SECURE_SSL_REDIRECT", STRAND_HTTPS)
SECURE_HSTS_SECONDS = int(
    os.environ.get("SECURE_HSTS_SECONDS", str(365 * 24 * 3600) if STRAND_HTTPS else "0")
)
# A header sent by strand.example.com binds only that host and the hosts under it.
SECURE_HSTS_INCLUDE_SUBDOMAINS = _env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", STRAND_HTTPS)
SECURE_HSTS_PRELOAD = _env_bool("SECURE_HSTS_PRELOAD", STRAND_HTTPS)
# Trusted only when set: a client that reaches daphne directly could send the header itself.
SECURE_PROXY_SSL_HEADER = _proxy_ssl_header(os.environ.get("SECURE_PROXY_SSL_HEADER", ""))
# Origins (https://strand.example.com) allowed to post forms when the proxy rewrites Host.
CSRF_TRUSTED_ORIGINS = _env_list("CSRF_TRUSTED_ORIGINS")

# STRAND_PASSWORD_HASHERS: Django's PASSWORD_HASHERS as dotted paths, comma-separated, the
# first for new passwords (e.g. Argon2 first, where argon2-cffi is installed); unset,
# Django's own list (PBKDF2-SHA256 first).
if _hashers := _env_list("STRAND_PASSWORD_HASHERS"):
    PASSWORD_HASHERS = _hashers

# Scripts and styles come only from Strand's own static files: no inline script, no eval,
# no style attributes (data reaches scripts as data-* attributes). Images may be data: URIs
# (attachments in a conversation are embedded that way). 'self' in connect-src also allows
# ws:/wss: to the page's own host (CSP Level 3), which the live feed uses. The HTML export
# answers with its own policy (sessions_app/web/views.py).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}

# --- Strand ------------------------------------------------------------------------------

# The account that local commands and `make run` act as when no --owner is given.
STRAND_LOCAL_USER = os.environ.get("STRAND_LOCAL_USER", "local")
# Largest accepted event, as JSON bytes, and most events in one append.
STRAND_MAX_EVENT_BYTES = int(os.environ.get("STRAND_MAX_EVENT_BYTES", str(1024 * 1024)))
STRAND_MAX_BATCH = int(os.environ.get("STRAND_MAX_BATCH", "1000"))
# Request bodies, refused at the door past these (config/body_limits.py): a request without a
# session cookie or API token, and sign-in, at most STRAND_MAX_ANONYMOUS_BODY_BYTES; a Pi file
# at most STRAND_MAX_IMPORT_BYTES; any other body at most STRAND_MAX_BODY_BYTES, which holds
# an event of the largest size with room to spare. Django reads a body (not a file) into
# memory, so its own limit is the same.
STRAND_MAX_ANONYMOUS_BODY_BYTES = int(os.environ.get("STRAND_MAX_ANONYMOUS_BODY_BYTES", "8192"))
STRAND_MAX_IMPORT_BYTES = int(os.environ.get("STRAND_MAX_IMPORT_BYTES", str(50 * 1024 * 1024)))
# An upload into a session's workspace (an archive, or files), as sent.
STRAND_MAX_UPLOAD_BYTES = int(os.environ.get("STRAND_MAX_UPLOAD_BYTES", str(50 * 1024 * 1024)))
STRAND_MAX_BODY_BYTES = int(
    os.environ.get("STRAND_MAX_BODY_BYTES", str(max(4 * 1024 * 1024, 2 * STRAND_MAX_EVENT_BYTES)))
)
# OTLP trace export (`POST /v1/traces`): the body as sent (gzip or not), and once gunzipped
# (decompression stops there, so a gzip bomb inflates no further).
STRAND_MAX_OTLP_BYTES = int(os.environ.get("STRAND_MAX_OTLP_BYTES", str(STRAND_MAX_BODY_BYTES)))
STRAND_MAX_OTLP_DECODED_BYTES = int(
    os.environ.get("STRAND_MAX_OTLP_DECODED_BYTES", str(16 * 1024 * 1024))
)
DATA_UPLOAD_MAX_MEMORY_SIZE = max(STRAND_MAX_BODY_BYTES, STRAND_MAX_OTLP_BYTES)
# Deepest nesting of objects and arrays in an entry (or the data of an event that adds none),
# refused past it at append and at Pi import: every renderer is tested at this depth.
STRAND_MAX_JSON_DEPTH = int(os.environ.get("STRAND_MAX_JSON_DEPTH", "64"))
# Bytes of JSON one user's sessions may hold (events and entries, counted as appended); an
# append past it is refused whole (413 quota_exceeded). 0 turns the quota off.
STRAND_USER_QUOTA_BYTES = int(os.environ.get("STRAND_USER_QUOTA_BYTES", str(10 * 1024**3)))
# Most bytes of stored data (as JSON text) in one page of the raw-data API (events, entries,
# the path window): a page stops before the item that would pass it, but holds at least one.
STRAND_API_PAGE_BYTES = int(os.environ.get("STRAND_API_PAGE_BYTES", str(1024 * 1024)))
# Most bytes of stored data (as JSON text) one read that is not paged may gather: a model
# context (the context view and API, a request rebuilt, a comparison's contexts) and the
# chat's whole path (?all=1). Past it the API answers 413 saying what to read instead and the
# page shows a window and says so (sessions_app/selectors/ceilings.py).
STRAND_WHOLE_READ_BYTES = int(os.environ.get("STRAND_WHOLE_READ_BYTES", str(8 * 1024 * 1024)))
# Per-user rate limits, as JSON: {"message": [30, 60], "import": [20, 3600]} means 30 messages
# a minute and 20 imports an hour; [0, N] turns a limit off. Scopes not named keep their
# defaults (sessions_app.services.ratelimit.DEFAULT_LIMITS: also append, session, fork, summary,
# compact, replay, search, token, and the small writes: rename, navigate, label, approval,
# cancel, delete and revoke).
STRAND_RATE_LIMITS = {
    scope: tuple(limit)
    for scope, limit in json.loads(os.environ.get("STRAND_RATE_LIMITS", "{}")).items()
}
# Turns open at once (running, or waiting for an approval): at most this many per user,
# across processes, and per server process; beyond them a new turn is refused with 429
# (sessions_app.agent.admission). 0 turns a cap off.
STRAND_MAX_TURNS_PER_USER = int(os.environ.get("STRAND_MAX_TURNS_PER_USER", "8"))
STRAND_MAX_TURNS_PER_PROCESS = int(os.environ.get("STRAND_MAX_TURNS_PER_PROCESS", "64"))
# How long a turn waits for an approval decision before it ends as `approval_timeout`
# (0: forever).
STRAND_APPROVAL_TIMEOUT_S = float(os.environ.get("STRAND_APPROVAL_TIMEOUT_S", "600"))
# Subagents (a `task` call's child session, sessions_app.agent.children): how deep they
# nest, how many one session and one user (an hour) start, how long one may run. 0 turns
# a cap off (the depth: no subagents at all).
STRAND_SUBAGENT_MAX_DEPTH = int(os.environ.get("STRAND_SUBAGENT_MAX_DEPTH", "3"))
STRAND_SUBAGENTS_PER_SESSION = int(os.environ.get("STRAND_SUBAGENTS_PER_SESSION", "16"))
STRAND_SUBAGENTS_PER_USER_HOUR = int(os.environ.get("STRAND_SUBAGENTS_PER_USER_HOUR", "60"))
STRAND_SUBAGENT_TIMEOUT_S = float(os.environ.get("STRAND_SUBAGENT_TIMEOUT_S", "600"))
# Open websockets re-check their sign-in at once on sign-out and account changes
# (sessions_app.live.access), and every this many seconds besides (an expired session).
STRAND_WS_RECHECK_S = float(os.environ.get("STRAND_WS_RECHECK_S", "60"))
# The live feed's changes to Twisted and autobahn (sessions_app.live.wire), applied when
# config/asgi.py loads; 0 serves with both libraries exactly as released.
STRAND_WIRE_TUNING = _env_bool("STRAND_WIRE_TUNING", True)

# --- Limits: rate-limited pages and sign-in throttling ---------------------------------------
# A page refused by a rate limit answers 429 (sessions_app.web.limit_responses). Sign-in is
# throttled by django-axes: STRAND_SIGNIN_FAILURES failed sign-ins (5) for one user name from
# one address pause that pair for STRAND_SIGNIN_COOLOFF_MINUTES (15), restarted by each
# failure meanwhile; other addresses can still sign in as that user, so a stranger cannot
# lock someone out. The address is the connection's, or behind trusted proxies the one they
# forwarded (STRAND_TRUSTED_PROXIES below). A success clears the count.
INSTALLED_APPS += ["axes"]
MIDDLEWARE += [
    "sessions_app.web.limit_responses.RateLimitedPages",
    "axes.middleware.AxesMiddleware",  # last, as django-axes asks
]
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = int(os.environ.get("STRAND_SIGNIN_FAILURES", "5"))
AXES_COOLOFF_TIME = timedelta(minutes=float(os.environ.get("STRAND_SIGNIN_COOLOFF_MINUTES", "15")))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "sessions_app.web.limit_responses.signin_paused"
# Behind proxies that append the client's address to X-Forwarded-For (HAProxy's `option
# forwardfor`, nginx's `$proxy_add_x_forwarded_for`), how many of them to believe; 0 (the
# default) believes none and counts by the connection's address.
STRAND_TRUSTED_PROXIES = int(os.environ.get("STRAND_TRUSTED_PROXIES", "0"))
AXES_CLIENT_IP_CALLABLE = "sessions_app.web.limit_responses.client_address"

# Folders under which sessions may have their working directory (where the agent's tools
# read and write), separated by os.pathsep. A new session gets its owner's own folder under
# the first one.
STRAND_WORKSPACE_ROOTS = [
    root
    for root in os.environ.get("STRAND_WORKSPACE_ROOTS", str(STATE_DIR / "workspaces")).split(
        os.pathsep
    )
    if root
]

# What the agent may do in one go, whatever a session's preset says. Tool calls one model
# reply may make: each call past the cap gets an error result and is neither asked about
# nor run (0: no cap). The agent's writes (write_file) are held to a quota of the folder
# they land in (sessions_app.workspaces.run_limits: the owner's own folder when the session
# works in it): bytes of all its files, files and directories in it, bytes and path depth of
# one write; a write past one is an error result naming it (0 turns a bound off).
STRAND_MAX_TOOL_CALLS_PER_REPLY = int(os.environ.get("STRAND_MAX_TOOL_CALLS_PER_REPLY", "32"))
STRAND_WORKSPACE_MAX_BYTES = int(os.environ.get("STRAND_WORKSPACE_MAX_BYTES", str(1024**3)))
STRAND_WORKSPACE_MAX_FILES = int(os.environ.get("STRAND_WORKSPACE_MAX_FILES", "10000"))
STRAND_WORKSPACE_MAX_WRITE_BYTES = int(
    os.environ.get("STRAND_WORKSPACE_MAX_WRITE_BYTES", str(1024 * 1024))
)
STRAND_WORKSPACE_MAX_DEPTH = int(os.environ.get("STRAND_WORKSPACE_MAX_DEPTH", "32"))

# --- OpenTelemetry: sessions out as GenAI spans (sessions_app.projectors.otlp) -------------
# STRAND_OTLP_ENDPOINT: an OTLP/HTTP traces URL (say http://127.0.0.1:6006/v1/traces); when
# set, the projector pushes each finished turn's spans there (protobuf), batched, retried
# with backoff while the collector is down. STRAND_OTLP_HEADERS: headers sent with each
# push, `name=value` pairs separated by commas (OTEL_EXPORTER_OTLP_HEADERS's form).
# STRAND_OTLP_CAPTURE_CONTENT=0 sends only structure, timings and usage: no prompts,
# messages, tool definitions, arguments or results. A content attribute longer than
# STRAND_OTLP_ATTRIBUTE_CHARS is left out (and named in `strand.content.omitted`).
STRAND_OTLP_ENDPOINT = os.environ.get("STRAND_OTLP_ENDPOINT", "").strip()
STRAND_OTLP_HEADERS = os.environ.get("STRAND_OTLP_HEADERS", "")
STRAND_OTLP_CAPTURE_CONTENT = _env_bool("STRAND_OTLP_CAPTURE_CONTENT", True)
STRAND_OTLP_ATTRIBUTE_CHARS = int(os.environ.get("STRAND_OTLP_ATTRIBUTE_CHARS", str(256 * 1024)))
STRAND_OTLP_TIMEOUT_S = float(os.environ.get("STRAND_OTLP_TIMEOUT_S", "10"))
# The wait after a failed push doubles from STRAND_OTLP_BACKOFF_S up to _MAX_S.
STRAND_OTLP_BACKOFF_S = float(os.environ.get("STRAND_OTLP_BACKOFF_S", "1"))
STRAND_OTLP_BACKOFF_MAX_S = float(os.environ.get("STRAND_OTLP_BACKOFF_MAX_S", "60"))

# Background jobs (`bash` with background=true): at most so many running at once per session,
# per user (across processes) and per server process; each runs at most STRAND_JOB_WALL_S
# seconds and keeps at most STRAND_JOB_OUTPUT_BYTES of its output (head and tail).
STRAND_MAX_JOBS_PER_SESSION = int(os.environ.get("STRAND_MAX_JOBS_PER_SESSION", "4"))
STRAND_MAX_JOBS_PER_USER = int(os.environ.get("STRAND_MAX_JOBS_PER_USER", "8"))
STRAND_MAX_JOBS_PER_PROCESS = int(os.environ.get("STRAND_MAX_JOBS_PER_PROCESS", "32"))
STRAND_JOB_WALL_S = float(os.environ.get("STRAND_JOB_WALL_S", "600"))
STRAND_JOB_OUTPUT_BYTES = int(os.environ.get("STRAND_JOB_OUTPUT_BYTES", str(32 * 1024)))
