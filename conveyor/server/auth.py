"""Who is calling: AWS Signature Version 4 for the SQS API, a bearer token for REST.

Without configured credentials any signature is accepted and only read for its region
and access key (as local SQS emulators do). With ``--aws-credentials FILE`` (the AWS CLI's
credentials format: a section per key with ``aws_access_key_id``,
``aws_secret_access_key`` and optionally ``account``) every SQS request must carry a valid
signature by one of those keys, made within the last 15 minutes.
"""

from __future__ import annotations

import configparser
import datetime as dt
import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, quote

from ..exceptions import (
    AccessDenied,
    InvalidClientTokenId,
    InvalidInput,
    SignatureDoesNotMatch,
    Unauthorized,
)
from .sqs_names import ACCOUNT_RE, REGION_RE, Caller, Namespaces

AUTH_RE = re.compile(
    r"AWS4-HMAC-SHA256\s+Credential=([^/,\s]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request\s*,\s*"
    r"SignedHeaders=([^,\s]+)\s*,\s*Signature=([0-9a-f]{64})"
)
MAX_SKEW = 15 * 60


@dataclass(frozen=True, slots=True)
class Key:
    secret: str
    account: str | None = None


def load_credentials(path: str | Path) -> dict[str, Key]:
    """Access keys from an AWS credentials file; errors say which section is wrong."""
    parser = configparser.ConfigParser()
    try:
        with open(path, encoding="utf-8") as f:
            parser.read_file(f)
    except (OSError, configparser.Error) as exc:
        raise InvalidInput(f"cannot read AWS credentials from {path}: {exc}") from None
    keys: dict[str, Key] = {}
    for section in parser.sections():
        s = parser[section]
        key_id, secret = s.get("aws_access_key_id"), s.get("aws_secret_access_key")
        if not key_id or not secret:
            raise InvalidInput(
                f"{path} [{section}]: needs aws_access_key_id and aws_secret_access_key"
            )
        account = s.get("account")
        if account is not None and not ACCOUNT_RE.fullmatch(account):
            raise InvalidInput(f"{path} [{section}]: account must be 12 digits")
        keys[key_id] = Key(secret, account)
    if not keys:
        raise InvalidInput(f"{path} holds no access keys")
    return keys


@dataclass
class Auth:
    namespaces: Namespaces
    token: str | None = None
    keys: Mapping[str, Key] = field(default_factory=dict)

    @property
    def verifies(self) -> bool:
        return bool(self.keys)

    def check_bearer(self, header: str | None) -> None:
        if self.token is None:
            return
        scheme, _, value = (header or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip(), self.token):
            raise Unauthorized(
                "this server requires 'Authorization: Bearer <token>' (the --auth-token it was"
                " started with)"
            )

    def caller(
        self,
        *,
        method: str,
        raw_path: str,
        query: str,
        headers: Mapping[str, str],
        body: bytes,
        base_url: str,
        now: float,
    ) -> Caller:
        ns = self.namespaces
        header = headers.get("authorization", "")
        match = AUTH_RE.match(header)
        if match is None:
            if self.verifies:
                raise AccessDenied(
                    "this server requires requests signed with AWS Signature Version 4 by a"
                    " key in its credentials file"
                )
            region = _region_from_query(query) or ns.region
            return Caller(region=region, account=ns.account, base_url=base_url)
        key_id, date, region, service, signed, signature = match.groups()
        if not REGION_RE.fullmatch(region):
            raise AccessDenied(f"the signature's region {region!r} is not a region name")
        account = key_id if ACCOUNT_RE.fullmatch(key_id) else ns.account
        if self.verifies:
            key = self.keys.get(key_id)
            if key is None:
                raise InvalidClientTokenId(
                    "The security token included in the request is invalid: unknown access key"
                    f" {key_id}"
                )
            account = key.account or account
            amz_date = headers.get("x-amz-date", "")
            _check_time(amz_date, date, now)
            expected = signature_v4(
                secret=key.secret,
                method=method,
                raw_path=raw_path,
                query=query,
                headers=headers,
                signed_headers=signed.split(";"),
                body=body,
                amz_date=amz_date,
                scope=f"{date}/{region}/{service}/aws4_request",
            )
            if not hmac.compare_digest(expected, signature):
                raise SignatureDoesNotMatch(
                    "The request signature we calculated does not match the signature you"
                    " provided. Check your AWS Secret Access Key and signing method."
                )
        return Caller(region=region, account=account, base_url=base_url)


def _region_from_query(query: str) -> str | None:
    for key, value in parse_qsl(query):
        if key == "X-Amz-Credential":
            parts = value.split("/")
            if len(parts) == 5 and REGION_RE.fullmatch(parts[2]):
                return parts[2]
    return None


def _check_time(amz_date: str, date: str, now: float) -> None:
    try:
        when = dt.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.UTC)
    except ValueError:
        raise SignatureDoesNotMatch("X-Amz-Date must be present as YYYYMMDDTHHMMSSZ") from None
    if not amz_date.startswith(date):
        raise SignatureDoesNotMatch("the credential scope's date differs from X-Amz-Date")
    if abs(when.timestamp() - now) > MAX_SKEW:
        raise SignatureDoesNotMatch(
            "Signature expired: the request was signed more than 15 minutes from now"
            " (check the client's clock)"
        )


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def signature_v4(
    *,
    secret: str,
    method: str,
    raw_path: str,
    query: str,
    headers: Mapping[str, str],
    signed_headers: list[str],
    body: bytes,
    amz_date: str,
    scope: str,
) -> str:
    """The hex signature AWS SigV4 gives this request (see AWS's signing documentation)."""
    canonical_query = "&".join(
        f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}"
        for k, v in sorted(parse_qsl(query, keep_blank_values=True))
    )
    canonical_headers = "".join(
        f"{name}:{' '.join(headers.get(name, '').split())}\n" for name in signed_headers
    )
    payload = headers.get("x-amz-content-sha256") or hashlib.sha256(body).hexdigest()
    canonical = "\n".join(
        [
            method,
            quote(raw_path or "/", safe="/~"),
            canonical_query,
            canonical_headers,
            ";".join(signed_headers),
            payload,
        ]
    )
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    date, region, service, _ = scope.split("/")
    key = _hmac(("AWS4" + secret).encode(), date)
    for part in (region, service, "aws4_request"):
        key = _hmac(key, part)
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
