"""The SigV4 credentials the security tests' servers are given, and requests signed with them."""

from __future__ import annotations

from botocore.credentials import Credentials

CREDENTIALS = """\
[default]
aws_access_key_id = AKIDGOOD
aws_secret_access_key = s3cret
"""
GOOD = Credentials("AKIDGOOD", "s3cret")
PARTNER_CREDENTIALS = (
    CREDENTIALS
    + """
[partner]
aws_access_key_id = AKIDPARTNER
aws_secret_access_key = other
account = 111122223333
"""
)
"""`CREDENTIALS` and a key of another account (111122223333)."""
