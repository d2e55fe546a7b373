"""A password hasher for the tests: Django's own PBKDF2-SHA256 at a thousand iterations.

Nearly every test makes users, and the million iterations Django uses by default cost a
quarter of a CPU second per password. tests/conftest.py names it in
`STRAND_PASSWORD_HASHERS`, so the server processes a test starts hash and check as the test
does: with Django's default they would re-hash each password at the full count on its
first sign-in (it is weaker than theirs), and a test saving the user it holds would undo
that change of hash and sign every browser out.
"""

from __future__ import annotations

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class QuickPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    iterations = 1000
