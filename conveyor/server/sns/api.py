"""The SNS API (Query protocol) over Conveyor's topics: one model for SNS, REST, SDK and CLI.

An SNS topic is a Conveyor topic, stored under its plain name in the server's default region
and account and as ``region:account:name`` in any other, like queues. Topic attributes and
tags are the topic's settings; a subscription is a queue's subscription, its attributes
(``RawMessageDelivery``, ``FilterPolicy``, ...) the subscription's. The actions are answered
by concept: `topics`, `subscriptions` and `publishing`, over the names and access checks of
`arns`; `wire` reads and writes the Query protocol. Deliveries go to SQS queues and, through
queues of their own, to HTTP/S endpoints (`webhooks`) and outboxes (`outbox`).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable

from ...client import Client
from ...exceptions import (
    InvalidInput,
    NotFound,
    QueueDoesNotExist,
    SnsError,
    TopicDoesNotExist,
)
from ..sqs.names import Caller, Namespaces
from .arns import Arns
from .publishing import Publishing
from .signing import Signer
from .subscriptions import Subscriptions
from .topics import Topics
from .webhooks import EndpointRules
from .wire import Params, Result, invalid, not_found

__all__ = ["ACTIONS", "SnsApi"]

Action = Callable[[Params, Caller], Result]


class SnsApi:
    """Answers SNS (and STS GetCallerIdentity) actions: each by the part that holds its
    concept, called on a thread (the store's calls block)."""

    def __init__(
        self,
        client: Client,
        namespaces: Namespaces | None = None,
        *,
        signer: Signer | None = None,
        endpoints: EndpointRules | None = None,
        outbox: frozenset[str] = frozenset(),
    ) -> None:
        self.client = client
        self.arns = Arns(client, namespaces or Namespaces())
        signer = signer or Signer(client)
        self.topics = Topics(self.arns)
        self.subscriptions = Subscriptions(self.arns, signer, endpoints or EndpointRules(), outbox)
        self.publishing = Publishing(self.arns, signer, outbox)
        self.actions: dict[str, Action] = {a: route(self) for a, route in ROUTES.items()}

    async def call(self, action: str, params: Params, caller: Caller) -> Result:
        fn = self.actions.get(action)
        if fn is None:
            raise SnsError("InvalidAction", f"The action {action} is not valid for this endpoint.")
        try:
            return await asyncio.to_thread(fn, params, dataclasses.replace(caller, action=action))
        except SnsError:
            raise
        except TopicDoesNotExist:
            raise not_found("Topic does not exist") from None
        except QueueDoesNotExist as exc:
            raise not_found(exc.message) from None
        except NotFound as exc:
            raise not_found(exc.message) from None
        except InvalidInput as exc:
            raise invalid(exc.message) from None


def caller_identity(params: Params, caller: Caller) -> Result:
    """STS GetCallerIdentity, which SDK programs ask to learn their account for ARNs."""
    return {
        "UserId": caller.user or caller.account,
        "Account": caller.account,
        "Arn": caller.principal,
    }


ROUTES: dict[str, Callable[[SnsApi], Action]] = {
    "CreateTopic": lambda api: api.topics.create_topic,
    "DeleteTopic": lambda api: api.topics.delete_topic,
    "ListTopics": lambda api: api.topics.list_topics,
    "GetTopicAttributes": lambda api: api.topics.get_topic_attributes,
    "SetTopicAttributes": lambda api: api.topics.set_topic_attributes,
    "AddPermission": lambda api: api.topics.add_permission,
    "RemovePermission": lambda api: api.topics.remove_permission,
    "PutDataProtectionPolicy": lambda api: api.topics.put_data_protection_policy,
    "GetDataProtectionPolicy": lambda api: api.topics.get_data_protection_policy,
    "TagResource": lambda api: api.topics.tag_resource,
    "UntagResource": lambda api: api.topics.untag_resource,
    "ListTagsForResource": lambda api: api.topics.list_tags,
    "Subscribe": lambda api: api.subscriptions.subscribe,
    "ConfirmSubscription": lambda api: api.subscriptions.confirm_subscription,
    "Unsubscribe": lambda api: api.subscriptions.unsubscribe,
    "ListSubscriptions": lambda api: api.subscriptions.list_subscriptions,
    "ListSubscriptionsByTopic": lambda api: api.subscriptions.list_subscriptions_by_topic,
    "GetSubscriptionAttributes": lambda api: api.subscriptions.get_subscription_attributes,
    "SetSubscriptionAttributes": lambda api: api.subscriptions.set_subscription_attributes,
    "Publish": lambda api: api.publishing.publish,
    "PublishBatch": lambda api: api.publishing.publish_batch,
    "GetCallerIdentity": lambda api: caller_identity,
}
"""Each action the SNS API serves, and the part's method that answers it."""
ACTIONS = frozenset(ROUTES)
"""The actions the SNS API serves: a request for one of them without an SQS signature goes
to SNS."""
