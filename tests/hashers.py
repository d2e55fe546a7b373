"""A password hasher for the tests: Django's own PBKDF2-SHA256 at a thousand iterations.

Nearly every test makes users, and each of the million iterations Django uses by default
costs a quarter of a CPU second per password. The hashes it writes are ordinary
`pbkdf2_sha256$1000$…` ones, which carry their iteration count: the server processes a
test starts (with Django's default hashers) check them as they would any other, and
re-hash them at the full count on a sign-in, as they do any weaker hash.
"""

from __future__ import annotations

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class QuickPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    iterations = 1000
