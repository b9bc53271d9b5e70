"""SNS's names for topics and subscriptions (their ARNs), and who may act on them.

A topic is stored under its plain name in the server's default region and account and as
``region:account:name`` in any other (`Namespaces`); its ARN says the same. A subscription's
ARN is its topic's and a UUID made from the topic and the queue its messages go to. A caller
whose signature was verified acts on its own account's topics and subscriptions, and on
another account's where the topic's Policy allows it; a refusal says the same whether or not
the topic exists.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from typing import Any, NoReturn

from ...client import Client
from ...exceptions import InvalidInput, SnsError, TopicDoesNotExist
from ..sqs.names import Caller, Namespaces
from ..sqs.policy import BATCH as BATCH_OF
from ..sqs.policy import allows
from .attributes import PERMISSION_ACTIONS
from .pending import PENDING
from .webhooks import CONFIRM
from .wire import invalid, not_found

TOPIC_ARN_RE = re.compile(
    r"arn:aws[a-z-]*:sns:([a-z0-9-]{1,32}):([0-9]{12}):([A-Za-z0-9_-]{1,256}(?:\.fifo)?)"
)
SUBSCRIPTION_ARN_RE = re.compile(TOPIC_ARN_RE.pattern + r":([0-9a-f-]{36})")
SUBSCRIPTIONS = uuid.UUID("6f1c1d2e-5b0c-4e55-9a43-6c0e8c5a7d10")
PRINCIPAL = "SubscriptionPrincipal"  # who subscribed, kept with the subscription


class Arns:
    """The topics and subscriptions that ARNs name, as the caller may reach them."""

    def __init__(self, client: Client, namespaces: Namespaces) -> None:
        self.client = client
        self.ns = namespaces

    def topic_arn(self, stored: str) -> str:
        region, account, name = self.ns.split(stored)
        return f"arn:aws:sns:{region}:{account}:{name}"

    def topic(self, arn: Any, caller: Caller, param: str = "TopicArn") -> str:
        """The stored name of the topic an ARN names (which need not exist)."""
        match = TOPIC_ARN_RE.fullmatch(arn) if isinstance(arn, str) else None
        if match is None:
            check_arn_parts(param, arn if isinstance(arn, str) else "")
            raise invalid(f"{param}: {arn!r} is not a topic ARN (arn:aws:sns:REGION:ACCOUNT:NAME)")
        topic = self.ns.store_name(match.group(1), match.group(2), match.group(3))
        self.may_call(caller, topic, match.group(2), arn)
        if match.group(1) != caller.region:
            raise invalid(param)  # another region's topic, asked of this region's endpoint
        return topic

    def may_call(self, caller: Caller, topic: str, account: str, arn: str) -> None:
        """A caller whose signature was verified reaches its own account's topics, and
        another account's where the topic's Policy allows the action (as AddPermission
        writes it: `SNS:Publish` for `arn:aws:iam::ACCOUNT:root`); the refusal is the same
        whether or not the topic exists."""
        if not caller.verified or account == caller.account:
            return
        if BATCH_OF.get(caller.action, caller.action) in PERMISSION_ACTIONS:
            try:
                policy = self.client.topic_settings(topic).get("Policy")
            except (TopicDoesNotExist, InvalidInput):
                policy = None
            if allows(policy, caller.account, caller.action, arn, service="sns"):
                return
        refuse(caller, arn)

    def existing(
        self, arn: Any, caller: Caller, param: str = "TopicArn"
    ) -> tuple[str, dict[str, str]]:
        topic = self.topic(arn, caller, param)
        try:
            return topic, self.client.topic_settings(topic)
        except (TopicDoesNotExist, InvalidInput):
            raise not_found("Topic does not exist") from None

    def subscription_arn(self, topic: str, queue: str) -> str:
        key = uuid.uuid5(SUBSCRIPTIONS, f"{topic}\n{queue}")
        return f"{self.topic_arn(topic)}:{key}"

    def subscription(self, arn: Any, caller: Caller) -> tuple[str, str, dict[str, str]]:
        """(topic, queue, attributes) of a subscription ARN; NotFound if there is none."""
        match = SUBSCRIPTION_ARN_RE.fullmatch(arn) if isinstance(arn, str) else None
        if match is None:  # in SNS's words
            if not isinstance(arn, str):
                raise invalid("SubscriptionArn Reason: no value for required parameter")
            check_arn_parts("SubscriptionArn", arn)
            raise invalid("SubscriptionId")
        topic = self.ns.store_name(match.group(1), match.group(2), match.group(3))
        # another account's subscription: its subscriber's (or the topic owner's) to act on
        foreign = caller.verified and match.group(2) != caller.account
        try:
            subscriptions = self.subscriptions(topic)
        except (TopicDoesNotExist, InvalidInput):
            if foreign:
                refuse(caller, arn)
            raise not_found("Subscription does not exist") from None
        for queue, attributes in subscriptions.items():
            if self.subscription_arn(topic, queue) == arn:
                if foreign and account_of(attributes.get(PRINCIPAL)) != caller.account:
                    refuse(caller, arn)
                return topic, queue, attributes
        if foreign:
            refuse(caller, arn)
        raise not_found("Subscription does not exist")

    def subscriptions(
        self, topic: str, settings: Mapping[str, str] | None = None
    ) -> dict[str, dict[str, str]]:
        """Every subscription of `topic`, its queue's stored name to its attributes: those of
        existing queues and those waiting for their queue to be created."""
        settings = self.client.topic_settings(topic) if settings is None else settings
        out = self.client.subscriptions(topic)
        for key, value in settings.items():
            if key.startswith(PENDING):
                out.setdefault(key[len(PENDING) :], json.loads(value))
            elif key.startswith(CONFIRM):
                out.setdefault(key[len(CONFIRM) :], json.loads(value))
        return dict(sorted(out.items()))


def refuse(caller: Caller, arn: str) -> NoReturn:
    raise SnsError(
        "AuthorizationError",
        f"User: {caller.principal} is not authorized to perform:"
        f" SNS:{caller.action or 'request'} on resource: {arn}",
        403,
    )


def account_of(principal: str | None) -> str | None:
    """The account of an IAM ARN (`arn:aws:iam::ACCOUNT:...`)."""
    parts = (principal or "").split(":")
    return parts[4] if len(parts) > 5 and parts[2] == "iam" else None


def check_arn_parts(param: str, arn: str) -> None:
    """An ARN of fewer than six parts, refused in SNS's words."""
    parts = len(arn.split(":"))
    if parts < 6:
        raise invalid(f"{param} Reason: An ARN must have at least 6 elements, not {parts}")
