"""Who is calling: AWS Signature Version 4 for the SQS API, a bearer token for REST.

Without configured credentials any signature is accepted and only read for its region
and access key (as local SQS emulators do), and the caller is the account's IAM user
`anonymous`. With ``--aws-credentials FILE`` (the AWS CLI's
credentials format: a section per key with ``aws_access_key_id``,
``aws_secret_access_key`` and optionally ``account``; the section's name is the IAM user the
key stands for) every SQS request must carry a valid signature by one of those keys, made
within the last 15 minutes.
"""

from __future__ import annotations

import configparser
import dataclasses
import datetime as dt
import hashlib
import hmac
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, quote

from ...exceptions import (
    AccessDenied,
    InvalidClientTokenId,
    InvalidInput,
    SignatureDoesNotMatch,
    Unauthorized,
)
from ..sqs.names import ACCOUNT_RE, REGION_RE, Caller, Namespaces, host_region
from .conns import never_gone

AUTH_RE = re.compile(
    r"AWS4-HMAC-SHA256\s+Credential=([^/,\s]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request\s*,\s*"
    r"SignedHeaders=([^,\s]+)\s*,\s*Signature=([0-9a-f]{64})"
)
MAX_SKEW = 15 * 60
MAX_PRESIGNED = 7 * 24 * 3600  # the longest X-Amz-Expires AWS accepts
UNSIGNED = "UNSIGNED-PAYLOAD"
UNVERIFIED = "anonymous"
"""The IAM user a signed request stands for where the server checks no signatures."""


@dataclass(frozen=True, slots=True)
class Key:
    secret: str
    account: str | None = None
    user: str | None = None  # the IAM user it stands for: its section's name


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
        keys[key_id] = Key(secret, account, section)
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

    def check_bearer(self, header: str | None, *, also: str | None = None) -> None:
        """The request must carry the server's token (or `also`, a route group's own),
        compared in constant time."""
        tokens = [t for t in (self.token, also) if t is not None]
        if not tokens:
            return
        scheme, _, value = (header or "").partition(" ")
        given = value.strip().encode()
        # every token is compared, so the time taken does not say which one came close
        matches = [hmac.compare_digest(given, t.encode()) for t in tokens]
        if scheme.lower() != "bearer" or not any(matches):
            raise Unauthorized(
                "this server requires 'Authorization: Bearer <token>' (the --auth-token it was"
                " started with" + (", or --metrics-token for /metrics)" if also else ")")
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
        action: str = "",
        services: tuple[str, ...] = ("sqs",),
        gone: Callable[[], bool] = never_gone,
    ) -> Caller:
        """Who calls, from the request's signature (checked where the server has keys);
        `services`: the credential scopes the API takes (the first named in the refusal);
        `gone`: whether the client has closed its connection (`Caller.gone`)."""
        ns = self.namespaces
        header = headers.get("authorization", "")
        match = AUTH_RE.match(header)
        if match is None:
            presigned = _presigned(query)
            if presigned is not None:
                caller = self._presigned_caller(
                    presigned, method, raw_path, query, headers, body, base_url, now, services
                )
                return dataclasses.replace(caller, action=action, gone=gone)
            if self.verifies:
                raise AccessDenied(
                    "this server requires requests signed with AWS Signature Version 4 by a"
                    " key in its credentials file"
                )
            region = _region_from_query(query) or ns.region
            if ns.host_urls:  # an unsigned request to sqs.REGION.HOST is that region's
                region = host_region(headers.get("host", "").rsplit(":", 1)[0]) or region
            return Caller(
                region=region, account=ns.account, base_url=base_url, action=action, gone=gone
            )
        key_id, date, region, service, signed, signature = match.groups()
        if not REGION_RE.fullmatch(region):
            raise AccessDenied(f"the signature's region {region!r} is not a region name")
        account = key_id if ACCOUNT_RE.fullmatch(key_id) else ns.account
        user: str | None = UNVERIFIED
        if self.verifies:
            if header[match.end() :].strip():  # "Signature=<64 hex digits>" and more
                raise SignatureDoesNotMatch(
                    "The Authorization header goes on after its signature: send the header"
                    " as Signature Version 4 writes it, ending with Signature=<64 hex digits>."
                )
            _check_service(service, services)
            key = self._key(key_id)
            account = key.account or account
            user = key.user
            amz_date = headers.get("x-amz-date", "")
            _check_time(amz_date, date, now)
            signed_headers = signed.split(";")
            payload = _payload(headers, signed_headers, body)
            expected = signature_v4(
                secret=key.secret,
                method=method,
                raw_path=raw_path,
                query=query,
                headers=headers,
                signed_headers=signed_headers,
                payload=payload,
                amz_date=amz_date,
                scope=f"{date}/{region}/{service}/aws4_request",
            )
            _compare(expected, signature)
        return Caller(
            region=region,
            account=account,
            base_url=base_url,
            verified=self.verifies,
            scoped=True,
            action=action,
            user=user,
            gone=gone,
        )

    def _key(self, key_id: str) -> Key:
        key = self.keys.get(key_id)
        if key is None:
            raise InvalidClientTokenId(
                "The security token included in the request is invalid: unknown access key"
                f" {key_id}"
            )
        return key

    def _presigned_caller(
        self,
        params: dict[str, str],
        method: str,
        raw_path: str,
        query: str,
        headers: Mapping[str, str],
        body: bytes,
        base_url: str,
        now: float,
        services: tuple[str, ...],
    ) -> Caller:
        """Query-string authentication (a presigned URL): the signature, its scope, date,
        lifetime and signed headers are query parameters."""
        if params.get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256":
            raise AccessDenied("X-Amz-Algorithm must be AWS4-HMAC-SHA256")
        parts = params.get("X-Amz-Credential", "").split("/")
        if len(parts) != 5 or parts[4] != "aws4_request" or not REGION_RE.fullmatch(parts[2]):
            raise AccessDenied("X-Amz-Credential must be KEY/YYYYMMDD/REGION/SERVICE/aws4_request")
        key_id, date, region, service, _ = parts
        account = key_id if ACCOUNT_RE.fullmatch(key_id) else self.namespaces.account
        if not self.verifies:
            return Caller(
                region=region, account=account, base_url=base_url, scoped=True, user=UNVERIFIED
            )
        _check_service(service, services)
        key = self._key(key_id)
        amz_date = params.get("X-Amz-Date", "")
        expires = params.get("X-Amz-Expires", "")
        if not expires.isdigit() or not 1 <= int(expires) <= MAX_PRESIGNED:
            raise AccessDenied(f"X-Amz-Expires must be 1 to {MAX_PRESIGNED} seconds")
        _check_time(amz_date, date, now, expires=int(expires))
        signed_headers = params.get("X-Amz-SignedHeaders", "").split(";")
        if "host" not in signed_headers:
            raise AccessDenied("X-Amz-SignedHeaders must include host")
        unsigned = "&".join(p for p in query.split("&") if not p.startswith("X-Amz-Signature="))
        scope = f"{date}/{region}/{service}/aws4_request"
        # botocore signs the body's hash; other SDKs' presigners sign UNSIGNED-PAYLOAD, which
        # binds nothing only where there is nothing to bind: a request without a body
        payloads = [hashlib.sha256(body).hexdigest()] + ([UNSIGNED] if not body else [])
        signature = params.get("X-Amz-Signature", "")
        for payload in payloads:
            expected = signature_v4(
                secret=key.secret,
                method=method,
                raw_path=raw_path,
                query=unsigned,
                headers=headers,
                signed_headers=signed_headers,
                payload=payload,
                amz_date=amz_date,
                scope=scope,
            )
            if hmac.compare_digest(expected, signature):
                return Caller(
                    region=region,
                    account=key.account or account,
                    base_url=base_url,
                    verified=True,
                    scoped=True,
                    user=key.user,
                )
        _compare("", signature)
        raise AssertionError  # _compare raised


def _check_service(service: str, services: tuple[str, ...]) -> None:
    """A signature scoped to another service is not one for this API (SQS's words)."""
    if service not in services:
        raise SignatureDoesNotMatch(
            f"Credential should be scoped to correct service: '{services[0]}'."
        )


def signed_service(headers: Mapping[str, str], query: str) -> str:
    """The service a request's SigV4 credential scope names ('sqs', 'sns'), or '' unsigned."""
    match = AUTH_RE.match(headers.get("authorization", ""))
    if match is not None:
        return match.group(4)
    presigned = _presigned(query)
    if presigned is not None:
        parts = presigned.get("X-Amz-Credential", "").split("/")
        return parts[3] if len(parts) == 5 else ""
    return ""


def _presigned(query: str) -> dict[str, str] | None:
    if "X-Amz-Signature=" not in query:
        return None
    return {k: v for k, v in parse_qsl(query, keep_blank_values=True) if k.startswith("X-Amz-")}


def _payload(headers: Mapping[str, str], signed_headers: list[str], body: bytes) -> str:
    """The body's SHA-256, always computed: a client's x-amz-content-sha256 must equal it
    and be signed, so a captured signature cannot carry another body."""
    digest = hashlib.sha256(body).hexdigest()
    if "host" not in signed_headers:
        raise SignatureDoesNotMatch("SignedHeaders must include host")
    claimed = headers.get("x-amz-content-sha256")
    if claimed is not None:
        if "x-amz-content-sha256" not in signed_headers:
            raise SignatureDoesNotMatch(
                "x-amz-content-sha256 was sent but not signed: add it to SignedHeaders"
            )
        if claimed != digest:
            raise SignatureDoesNotMatch(
                "x-amz-content-sha256 is not the SHA-256 of the request body (this server"
                " accepts only signed payloads)"
            )
    return digest


def _compare(expected: str, signature: str) -> None:
    if not expected or not hmac.compare_digest(expected, signature):
        raise SignatureDoesNotMatch(
            "The request signature we calculated does not match the signature you"
            " provided. Check your AWS Secret Access Key and signing method."
        )


def _region_from_query(query: str) -> str | None:
    if "X-Amz-Credential=" not in query:
        return None
    for key, value in parse_qsl(query):
        if key == "X-Amz-Credential":
            parts = value.split("/")
            if len(parts) == 5 and REGION_RE.fullmatch(parts[2]):
                return parts[2]
    return None


def _check_time(amz_date: str, date: str, now: float, *, expires: int | None = None) -> None:
    try:
        when = dt.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.UTC)
    except ValueError:
        raise SignatureDoesNotMatch("X-Amz-Date must be present as YYYYMMDDTHHMMSSZ") from None
    if not amz_date.startswith(date):
        raise SignatureDoesNotMatch("the credential scope's date differs from X-Amz-Date")
    if expires is not None:  # a presigned URL: valid from its date (give or take the skew)
        if when.timestamp() - now > MAX_SKEW:
            raise AccessDenied("the presigned URL is dated in the future (check the clock)")
        if now > when.timestamp() + expires:
            raise AccessDenied(
                f"Request has expired: the presigned URL was valid for {expires} s from {amz_date}"
            )
        return
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
    payload: str,
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
