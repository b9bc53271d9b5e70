"""Queue URLs, ARNs and the region/account namespaces of the SQS API.

Queues of the server's default region and account are stored under their plain name, so
the SDK, the CLI and the REST API see the queues SQS clients make. Queues of any other
region or account are stored as ``region:account:name`` and are kept apart.

A queue's URL is ``BASE/ACCOUNT/NAME`` in the server's default region and
``BASE/queue/REGION/ACCOUNT/NAME`` in any other, so that one name in two regions has two
URLs, as on SQS (where the host names the region). ``BASE/ACCOUNT/NAME`` is also taken in
any region as the caller's region's queue. With host URLs (`conveyor serve --queue-urls
host`) the host names the region, as SQS's ``https://sqs.REGION.amazonaws.com/ACCOUNT/NAME``
do: ``scheme://sqs.REGION.HOST:PORT/ACCOUNT/NAME`` in every region (for clients that read
the account and name from a URL's last two parts, and whose DNS sends that name here); a
server addressed by an IP address still answers path URLs. Both forms are taken then.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ...exceptions import InvalidInput, QueueDoesNotExist
from ...validation import NAMESPACE_RE, check_queue_name
from ..front.conns import never_gone

ACCOUNT_RE = re.compile(r"[0-9]{12}")
REGION_RE = re.compile(r"[a-z](?:[a-z0-9-]{0,30}[a-z0-9])?")
"""A region name: `us-east-1`, or a local one such as `local`; never an address's digits
(a client given only `http://127.0.0.1` may sign its requests for region `0`)."""
ARN_RE = re.compile(r"arn:aws[a-z-]*:sqs:([a-z0-9-]{1,32}):([0-9]{12}):([A-Za-z0-9_.-]{1,80})")


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is calling and where: the signature's region and account, the URL they used."""

    region: str
    account: str
    base_url: str  # scheme://host:port the client addressed
    verified: bool = False  # the signature was checked against a known key
    scoped: bool = False  # the region is a signature's credential scope (not a default)
    action: str = ""  # the action called (what a queue policy is asked about)
    user: str | None = None  # the IAM user the access key stands for (None: the account)
    # whether the client has closed its connection (a long poll then stops waiting for it)
    gone: Callable[[], bool] = field(default=never_gone, compare=False, repr=False)

    @property
    def principal(self) -> str:
        """The caller's IAM ARN: a user of the account, or the account's root."""
        if self.user is None:
            return f"arn:aws:iam::{self.account}:root"
        return f"arn:aws:iam::{self.account}:user/{self.user}"


REGIONAL_HOST_RE = re.compile(rf"sqs\.({REGION_RE.pattern})\.(.+)")
"""A host that names a region: sqs.REGION.REST."""


def host_region(host: str) -> str | None:
    """The region a host name names (`sqs.eu-west-1.example.com`), if any."""
    match = REGIONAL_HOST_RE.fullmatch(host.lower())
    return match.group(1) if match is not None else None


@dataclass(frozen=True, slots=True)
class Namespaces:
    region: str = "us-east-1"
    account: str = "000000000000"
    host_urls: bool = False  # queue URLs name their region in the host (sqs.REGION.HOST)

    def store_name(self, region: str, account: str, name: str) -> str:
        if (region, account) == (self.region, self.account):
            return name
        return f"{region}:{account}:{name}"

    def split(self, store_name: str) -> tuple[str, str, str]:
        """(region, account, name) of a stored queue name."""
        ns = NAMESPACE_RE.match(store_name)
        if ns is None:
            return self.region, self.account, store_name
        region, account, _ = ns.group(0).split(":")
        return region, account, store_name[ns.end() :]

    def prefix(self, caller: Caller) -> str:
        return self.store_name(caller.region, caller.account, "")

    def in_namespace(self, store_name: str, caller: Caller) -> bool:
        region, account, _ = self.split(store_name)
        return (region, account) == (caller.region, caller.account)

    # -- URLs and ARNs --------------------------------------------------------------------

    def url(self, caller: Caller, store_name: str) -> str:
        region, account, name = self.split(store_name)
        if self.host_urls:
            regional = _regional(caller.base_url, region)
            if regional is not None:
                return f"{regional}/{account}/{name}"
        if region == self.region:
            return f"{caller.base_url}/{account}/{name}"
        return f"{caller.base_url}/queue/{region}/{account}/{name}"

    def arn(self, store_name: str) -> str:
        region, account, name = self.split(store_name)
        return f"arn:aws:sqs:{region}:{account}:{name}"

    def from_url(self, caller: Caller, url: object) -> str:
        """The stored name of the queue a QueueUrl names: its region (the caller's where the
        URL names none) and account."""
        if not isinstance(url, str) or not url:
            raise InvalidInput("QueueUrl must be the URL of a queue, as CreateQueue returns it")
        if "/" not in url:  # a queue's name, which SQS takes where a URL is expected
            try:
                check_queue_name(url)
            except InvalidInput:
                raise QueueDoesNotExist(f"The specified queue does not exist: {url}") from None
            return self.store_name(caller.region, caller.account, url)
        split = urlsplit(url) if "://" in url else None
        path = split.path if split is not None else url
        parts = [p for p in path.split("/") if p]
        region = caller.region
        named = None
        if self.host_urls and split is not None:  # else a host is only a host
            named = host_region(split.hostname or "")
        if len(parts) == 4 and parts[0] == "queue" and REGION_RE.fullmatch(parts[1]):
            named = parts[1]
            parts = parts[2:]
        if named is not None:
            region = named
            if caller.scoped and region != caller.region:
                # as on SQS, where a request signed for one region never reaches another's
                raise QueueDoesNotExist(
                    f"The specified queue does not exist: {url} is in region {region}, and"
                    f" the request is signed for {caller.region}"
                )
        if len(parts) != 2 or not ACCOUNT_RE.fullmatch(parts[0]):
            raise QueueDoesNotExist(
                f"The specified queue does not exist: {url!r} is not a queue URL"
                " (http://HOST:PORT/ACCOUNT/NAME)"
            )
        try:
            check_queue_name(parts[1])
        except InvalidInput:
            raise QueueDoesNotExist(f"The specified queue does not exist: {url}") from None
        return self.store_name(region, parts[0], parts[1])

    def from_arn(self, arn: object, what: str = "ARN") -> str:
        match = ARN_RE.fullmatch(arn) if isinstance(arn, str) else None
        if match is None:
            raise InvalidInput(
                f"{what} {arn!r} is not a queue ARN (arn:aws:sqs:REGION:ACCOUNT:NAME)"
            )
        return self.store_name(match.group(1), match.group(2), match.group(3))

    def from_name(self, caller: Caller, name: object, account: object = None) -> str:
        if not isinstance(name, str):
            raise InvalidInput("QueueName must be a string")
        check_queue_name(name)
        if NAMESPACE_RE.match(name):
            raise InvalidInput(f"invalid queue name {name!r}: ':' is not allowed")
        owner = caller.account if account is None else account
        if not isinstance(owner, str) or not ACCOUNT_RE.fullmatch(owner):
            raise InvalidInput(f"QueueOwnerAWSAccountId {owner!r} must be 12 digits")
        return self.store_name(caller.region, owner, name)


def _regional(base_url: str, region: str) -> str | None:
    """`base_url` with a host naming `region` (sqs.REGION.HOST, in place of a region its
    host names already); None for a server addressed by an IP address, or by a Host header
    that is no host and port."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    try:
        port = parts.port
    except ValueError:
        return None
    if not host or _is_address(host):
        return None
    match = REGIONAL_HOST_RE.fullmatch(host)
    rest = match.group(2) if match is not None else host
    return f"{parts.scheme}://sqs.{region}.{rest}" + (f":{port}" if port else "")


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
