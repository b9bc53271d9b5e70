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
        t, s, p = self.topics, self.subscriptions, self.publishing
        self.actions: dict[str, Action] = {
            "CreateTopic": t.create_topic,
            "DeleteTopic": t.delete_topic,
            "ListTopics": t.list_topics,
            "GetTopicAttributes": t.get_topic_attributes,
            "SetTopicAttributes": t.set_topic_attributes,
            "AddPermission": t.add_permission,
            "RemovePermission": t.remove_permission,
            "PutDataProtectionPolicy": t.put_data_protection_policy,
            "GetDataProtectionPolicy": t.get_data_protection_policy,
            "TagResource": t.tag_resource,
            "UntagResource": t.untag_resource,
            "ListTagsForResource": t.list_tags,
            "Subscribe": s.subscribe,
            "ConfirmSubscription": s.confirm_subscription,
            "Unsubscribe": s.unsubscribe,
            "ListSubscriptions": s.list_subscriptions,
            "ListSubscriptionsByTopic": s.list_subscriptions_by_topic,
            "GetSubscriptionAttributes": s.get_subscription_attributes,
            "SetSubscriptionAttributes": s.set_subscription_attributes,
            "Publish": p.publish,
            "PublishBatch": p.publish_batch,
            "GetCallerIdentity": caller_identity,
        }

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


ACTIONS = frozenset(
    {
        "CreateTopic",
        "DeleteTopic",
        "ListTopics",
        "GetTopicAttributes",
        "SetTopicAttributes",
        "AddPermission",
        "RemovePermission",
        "PutDataProtectionPolicy",
        "GetDataProtectionPolicy",
        "TagResource",
        "UntagResource",
        "ListTagsForResource",
        "Subscribe",
        "ConfirmSubscription",
        "Unsubscribe",
        "ListSubscriptions",
        "ListSubscriptionsByTopic",
        "GetSubscriptionAttributes",
        "SetSubscriptionAttributes",
        "Publish",
        "PublishBatch",
        "GetCallerIdentity",
    }
)
"""The actions the SNS API serves: a request for one of them without an SQS signature goes
to SNS (`SnsApi.actions` answers each: test_sns_outbox checks the two agree)."""
