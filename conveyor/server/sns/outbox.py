"""Outboxes: subscriptions of the protocols this server does not send over (e-mail, SMS,
mobile push, Lambda, Firehose), taken where the operator asks (`--sns-outbox`).

Such a subscription is kept as SNS keeps it, and each message SNS would send to its endpoint
is written, as that endpoint would get it, to a store queue of its own (`sns-outbox-...`,
tagged with its topic), where a program under development or a test reads what its users
would have been sent. Nothing leaves the server. E-mail subscriptions wait for their
confirmation as on SNS: the SubscriptionConfirmation is the first message of the outbox and
`ConfirmSubscription` takes its token; the others are confirmed when made.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ...exceptions import SnsError
from ...models import AttributeValue
from .wire import invalid

OUTBOX_PREFIX = "sns-outbox-"
"""The names of the outbox queues."""
OUTBOX_PROTOCOLS = frozenset({"email", "email-json", "sms", "application", "lambda", "firehose"})
"""The protocols an outbox can stand in for."""
CONFIRMED_BY_MAIL = frozenset({"email", "email-json"})
"""The protocols whose subscriptions wait for a confirmation (the others are confirmed)."""
TEXT_PROTOCOLS = frozenset({"email", "sms"})
"""The protocols whose endpoints get the message's text alone, not SNS's JSON."""

_EMAIL_RE = re.compile(r"[^@\s]+@[^@\s]+")
PHONE_RE = re.compile(r"\+?[1-9][0-9]{1,14}")
"""A phone number as SNS takes one (E.164: +15555550100)."""
MAX_ENDPOINT = 2048
"""The longest endpoint a subscription takes (a webhook's URL too)."""
DIRECT_SMS = OUTBOX_PREFIX + "sms-direct"
"""The outbox of SMS published to a phone number (Publish with PhoneNumber)."""
_ARN_RE = re.compile(r"arn:aws[a-z-]*:[a-z0-9-]+:[a-z0-9-]*:[0-9]{0,12}:.+")


def outbox_protocols(specs: Iterable[str]) -> frozenset[str]:
    """The protocols `--sns-outbox` names (`all` for every one); an unknown one is refused."""
    chosen: set[str] = set()
    for spec in specs:
        for name in spec.replace(",", " ").lower().split():
            if name == "all":
                chosen |= OUTBOX_PROTOCOLS
            elif name in OUTBOX_PROTOCOLS:
                chosen.add(name)
            else:
                known = ", ".join(sorted(OUTBOX_PROTOCOLS))
                raise ValueError(f"--sns-outbox: {name!r} is not one of {known} or all")
    return frozenset(chosen)


def check_endpoint(protocol: str, endpoint: object) -> str:
    """The endpoint of a subscription by `protocol`, in SNS's words where it is not one."""
    if not isinstance(endpoint, str) or not endpoint:
        raise invalid("Endpoint")
    if protocol in CONFIRMED_BY_MAIL and not _EMAIL_RE.fullmatch(endpoint):
        raise invalid("Email address")
    if protocol == "sms" and not PHONE_RE.fullmatch(endpoint):
        raise SnsError("InvalidParameter", f"Invalid SMS endpoint: {endpoint}")
    if protocol in ("application", "lambda", "firehose") and not _ARN_RE.fullmatch(endpoint):
        raise invalid(f"{protocol} endpoint: an ARN")
    return endpoint


def outbox_attributes(protocol: str, endpoint: str) -> dict[str, AttributeValue]:
    """The message attributes of what an outbox keeps: where it would have gone."""
    return {"Protocol": protocol, "Endpoint": endpoint}
