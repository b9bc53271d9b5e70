"""SNS's subscription actions: subscribe (a queue, a webhook, or an outbox), confirm,
unsubscribe, list, and a subscription's attributes. A queue's subscription is the store's;
one waiting for its queue to be created, or for a webhook's or e-mail's confirmation, is
kept in the topic's settings until then (`PENDING`, `CONFIRM`)."""

from __future__ import annotations

import contextlib
import json
import secrets
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from ...exceptions import QueueDoesNotExist, SnsError, TopicDoesNotExist
from ..sqs.names import ARN_RE, Caller
from ..sqs.policy import allows_topic
from .arns import PRINCIPAL, SUBSCRIPTIONS, Arns, account_of, refuse
from .attributes import (
    SUB_DEFAULTS,
    check_fifo_redrive,
    check_subscription_attribute,
    redrive_target,
    stored,
)
from .outbox import (
    CONFIRMED_BY_MAIL,
    MAX_ENDPOINT,
    OUTBOX_PREFIX,
    OUTBOX_PROTOCOLS,
    check_endpoint,
    outbox_attributes,
)
from .pending import PENDING
from .publication import timestamp
from .signing import Signer
from .webhooks import (
    CONFIRM,
    DELIVERY_PREFIX,
    HTTP_PROTOCOLS,
    TOPIC_TAG,
    DeliveryPolicy,
    EndpointRules,
)
from .wire import Entries, Params, Result, invalid, paged, query_map

# every protocol SNS knows (this server delivers to `sqs`, `http` and `https`)
SNS_PROTOCOLS = frozenset(
    {"http", "https", "email", "email-json", "sms", "sqs", "application", "lambda", "firehose"}
)
AUTHENTICATED = "ConfirmationWasAuthenticated"  # confirmed with AuthenticateOnUnsubscribe


class Subscriptions:
    """The subscription actions, each answering one request."""

    def __init__(
        self,
        arns: Arns,
        signer: Signer,
        endpoints: EndpointRules,
        outbox: frozenset[str],
    ) -> None:
        self.arns = arns
        self.client = arns.client
        self.ns = arns.ns
        self.signer = signer
        self.endpoints = endpoints
        self.outbox = outbox  # the protocols kept in outboxes (sns_outbox)

    def subscribe(self, params: Params, caller: Caller) -> Result:
        topic, _ = self.arns.existing(params.get("TopicArn"), caller)
        protocol, endpoint = params.get("Protocol"), params.get("Endpoint")
        attributes = query_map(params.get("Attributes"), "key", "value")
        for key, value in attributes.items():  # checked first, whatever the protocol, as SNS
            check_subscription_attribute(
                key, value, attributes, self.ns, where="Attributes Reason: "
            )
        if not isinstance(protocol, str) or protocol.lower() not in SNS_PROTOCOLS:
            raise invalid(f"Amazon SNS does not support this protocol string: {protocol}")
        if protocol.lower() in HTTP_PROTOCOLS or protocol.lower() in self.outbox:
            return self._subscribe_own_queue(
                topic, protocol.lower(), endpoint, attributes, params, caller
            )
        if protocol.lower() != "sqs":
            raise invalid(
                f"Protocol: {protocol!r} is not served here; this server delivers to SQS queues"
                " and HTTP/S endpoints (Protocol sqs, http or https), and keeps what it would"
                " send over the protocols its operator names with --sns-outbox"
            )
        if not isinstance(endpoint, str) or ARN_RE.fullmatch(endpoint) is None:
            raise invalid("SQS endpoint ARN")
        queue = self.ns.from_arn(endpoint, "Endpoint")
        self._may_deliver(caller, topic, queue, endpoint)
        if attributes.get("RedrivePolicy"):
            self._may_dead_letter(caller, topic, attributes["RedrivePolicy"])
        if queue.endswith(".fifo") and not topic.endswith(".fifo"):
            raise invalid(
                "Invalid parameter: Endpoint Reason: FIFO SQS Queues can not be subscribed to"
                " standard SNS topics"
            )
        if topic.endswith(".fifo") and queue.endswith(".fifo") and attributes.get("RedrivePolicy"):
            check_fifo_redrive(attributes["RedrivePolicy"], self.ns, "Attributes Reason: ")
        attributes = {k: stored(k, v) for k, v in attributes.items() if v != ""}
        current = self.arns.subscriptions(topic)
        if queue in current:
            have = current[queue]
            if any(
                stored(k, have.get(k, SUB_DEFAULTS.get(k, ""))) != v for k, v in attributes.items()
            ):
                raise invalid(
                    "Attributes Reason: Subscription already exists with different attributes"
                )
        else:
            attributes[PRINCIPAL] = caller.principal
            try:
                self.client.subscribe(topic, queue, attributes)
            except QueueDoesNotExist:
                # as SNS: a queue that does not exist (yet) may be subscribed; it gets
                # messages from the first publish after it is created
                self.client.update_topic_settings(topic, {PENDING + queue: json.dumps(attributes)})
        return {"SubscriptionArn": self.arns.subscription_arn(topic, queue)}

    def _may_deliver(self, caller: Caller, topic: str, queue: str, endpoint: str) -> None:
        """A signed caller subscribes its own account's queues, and another account's where
        that queue's policy lets the topic send to it (SNS's queue policy); the refusal is
        the same whether or not the queue exists, so that it tells nothing of the other
        account's queue names."""
        if not caller.verified or self.ns.split(queue)[1] == caller.account:
            return
        try:
            policy = self.client.queue_info(queue, fresh=True).attributes.settings.get("Policy")
        except QueueDoesNotExist:
            policy = None
        if not allows_topic(policy, self.arns.topic_arn(topic), endpoint):
            raise SnsError(
                "AuthorizationError",
                f"User: {caller.principal} is not authorized to perform:"
                f" SNS:Subscribe on resource: {endpoint} (the queue's Policy must allow"
                " sns.amazonaws.com to sqs:SendMessage from this topic)",
                403,
            )

    def _subscribe_own_queue(
        self,
        topic: str,
        protocol: str,
        endpoint: Any,
        attributes: dict[str, str],
        params: Params,
        caller: Caller,
    ) -> Result:
        """A webhook or outbox subscription, whose messages go to a queue of its own: a
        webhook's delivery queue, which the deliverer POSTs from, or an outbox (sns_outbox).
        Webhook and e-mail subscriptions are confirmed by the token of the confirmation
        sent there; the others when made."""
        webhook = protocol in HTTP_PROTOCOLS
        if isinstance(endpoint, str) and len(endpoint) > MAX_ENDPOINT:
            raise invalid(f"Endpoint Reason: longer than {MAX_ENDPOINT} characters")
        if webhook:
            if topic.endswith(".fifo"):
                raise invalid(f"Invalid protocol type: {protocol}")
            if not isinstance(endpoint, str) or not endpoint.lower().startswith(f"{protocol}://"):
                raise invalid("Endpoint must match the specified protocol")
            # as SNS, a name that does not resolve yet is subscribed; each POST is checked
            why = self.endpoints.refusal(endpoint, unknown=True)
            if why is not None:
                raise invalid(f"Endpoint Reason: {why}")
        else:
            endpoint = check_endpoint(protocol, endpoint)
        if attributes.get("RedrivePolicy"):
            self._may_dead_letter(caller, topic, attributes["RedrivePolicy"])
        region, account, _ = self.ns.split(topic)
        key = uuid.uuid5(SUBSCRIPTIONS, f"{topic}\n{protocol}\n{endpoint}").hex[:24]
        prefix = DELIVERY_PREFIX if webhook else f"{OUTBOX_PREFIX}{protocol}-"
        queue = self.ns.store_name(region, account, prefix + key)
        arn = self.arns.subscription_arn(topic, queue)
        wants_arn = str(params.get("ReturnSubscriptionArn", "false")).lower() == "true"
        if queue in self.client.subscriptions(topic):  # confirmed (a pending one is asked again)
            return {"SubscriptionArn": arn}
        made = {
            **{k: stored(k, v) for k, v in attributes.items() if v != ""},
            "Protocol": protocol,
            "Endpoint": endpoint,
            "Owner": caller.account,
            PRINCIPAL: caller.principal,
        }
        tags = {TOPIC_TAG: topic}
        if not webhook and protocol not in CONFIRMED_BY_MAIL:
            self.client.create_queue(queue, tags=tags)
            self.client.subscribe(topic, queue, made)
            return {"SubscriptionArn": arn}
        token = secrets.token_hex(64)
        waiting = {**made, "PendingConfirmation": "true", "Token": token}
        # waiting first: a deliverer removes a delivery queue that no subscription names
        self.client.update_topic_settings(topic, {CONFIRM + queue: json.dumps(waiting)})
        self.client.create_queue(queue, visibility_timeout=45 if webhook else 30, tags=tags)
        text = (
            f"You have chosen to subscribe to the topic {self.arns.topic_arn(topic)}.\nTo confirm"
            " the subscription, visit the SubscribeURL included in this message."
        )
        message = self._confirmation("SubscriptionConfirmation", topic, token, text, caller)
        self._post_later(queue, topic, waiting, message, caller)
        return {"SubscriptionArn": arn if wants_arn else "pending confirmation"}

    def _farewell(
        self, topic: str, queue: str, attributes: Mapping[str, str], caller: Caller
    ) -> None:
        """The UnsubscribeConfirmation SNS sends an endpoint, through its delivery queue
        (the deliverer removes the queue once it is empty and unsubscribed)."""
        arn = self.arns.subscription_arn(topic, queue)
        text = (
            f"You have chosen to deactivate subscription {arn}."
            "\nTo cancel this operation and restore the subscription, visit the SubscribeURL"
            " included in this message."
        )
        token = secrets.token_hex(64)
        message = self._confirmation("UnsubscribeConfirmation", topic, token, text, caller)
        self._post_later(queue, topic, attributes, message, caller)

    def _confirmation(
        self, kind: str, topic: str, token: str, text: str, caller: Caller
    ) -> dict[str, Any]:
        """A (un)subscription confirmation, its SubscribeURL confirming by `token`."""
        topic_arn = self.arns.topic_arn(topic)
        return {
            "Type": kind,
            "MessageId": str(uuid.uuid4()),
            "Token": token,
            "TopicArn": topic_arn,
            "Message": text,
            "SubscribeURL": f"{caller.base_url}/?Action=ConfirmSubscription"
            f"&TopicArn={topic_arn}&Token={token}",
            "Timestamp": timestamp(datetime.now(UTC)),
        }

    def _post_later(
        self,
        queue: str,
        topic: str,
        attributes: Mapping[str, str],
        message: dict[str, Any],
        caller: Caller,
    ) -> None:
        """A (un)subscription confirmation, signed, into the subscription's own queue: with
        what the deliverer needs to POST it (a webhook's), or as its outbox keeps it."""
        settings = self.client.topic_settings(topic)
        version = settings.get("SignatureVersion", "1")
        self.signer.sign(message, version, caller.base_url)
        protocol = attributes.get("Protocol", "")
        if protocol in OUTBOX_PROTOCOLS:
            sent = outbox_attributes(protocol, attributes["Endpoint"])
        else:
            info = delivery_info(self.arns, topic, queue, attributes, settings, message["Type"])
            info["SnsMessageId"] = message["MessageId"]
            sent = {"Sns": json.dumps(info)}
        self.client.queue(queue).send(json.dumps(message, indent=2), attributes=sent)

    def _may_dead_letter(self, caller: Caller, topic: str, redrive_policy: str) -> None:
        """A subscription's dead-letter queue in another account: as its queue."""
        target = redrive_target(redrive_policy, self.ns)
        self._may_deliver(caller, topic, target, self.ns.arn(target))

    def confirm_subscription(self, params: Params, caller: Caller) -> Result:
        """Confirm the webhook subscription a token was sent for. As SNS: the token decides
        (a TopicArn of the right region but another topic still confirms it), and
        confirming again answers the subscription's ARN."""
        try:  # its ARN first: malformed, or another region's, is SNS's "Topic"
            named = self.arns.topic(params.get("TopicArn"), caller)
        except SnsError as exc:
            if exc.code != "InvalidParameter":
                raise
            raise invalid("Topic") from None
        token = params.get("Token")
        if not isinstance(token, str) or not token:
            raise invalid("Token")
        topics = [named, *(t for t in self.client.list_topics() if t != named)]
        for topic in topics:
            if not self.ns.in_namespace(topic, caller):
                continue
            try:
                settings = self.client.topic_settings(topic)
                subscribed = self.client.subscriptions(topic)
            except TopicDoesNotExist:
                continue
            for queue, attributes in subscribed.items():
                if attributes.get("Token") == token:
                    return {"SubscriptionArn": self.arns.subscription_arn(topic, queue)}
            for key, value in settings.items():
                waiting = json.loads(value) if key.startswith(CONFIRM) else {}
                if waiting.get("Token") == token:
                    queue = key[len(CONFIRM) :]
                    waiting.pop("PendingConfirmation", None)
                    if str(params.get("AuthenticateOnUnsubscribe", "")).lower() == "true":
                        waiting[AUTHENTICATED] = "true"
                    self.client.subscribe(topic, queue, waiting)  # the token kept: idempotent
                    self.client.update_topic_settings(topic, {key: None})
                    return {"SubscriptionArn": self.arns.subscription_arn(topic, queue)}
        # SQS subscriptions are confirmed when made: no token is pending for them
        raise invalid("Token")

    def unsubscribe(self, params: Params, caller: Caller) -> Result:
        try:
            topic, queue, attributes = self.arns.subscription(params.get("SubscriptionArn"), caller)
        except SnsError as exc:
            if exc.code == "NotFound":
                return {}  # SNS: unsubscribing twice is no error
            raise
        if attributes.get(AUTHENTICATED) == "true" and not caller.scoped:
            # confirmed with AuthenticateOnUnsubscribe: an unsigned request (the
            # UnsubscribeURL's GET) may not end it
            refuse(caller, str(params.get("SubscriptionArn")))
        self.client.unsubscribe(topic, queue)
        self.client.update_topic_settings(topic, {PENDING + queue: None, CONFIRM + queue: None})
        if attributes.get("Protocol") in HTTP_PROTOCOLS:
            self._farewell(topic, queue, attributes, caller)
        return {}

    def _member(
        self, topic: str, queue: str, attributes: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        attributes = attributes or {}
        pending = attributes.get("PendingConfirmation") == "true"
        return {
            "SubscriptionArn": (
                "PendingConfirmation" if pending else self.arns.subscription_arn(topic, queue)
            ),
            # the account that subscribed (the topic's, for subscriptions kept before that was)
            "Owner": account_of(attributes.get(PRINCIPAL)) or self.ns.split(topic)[1],
            "Protocol": attributes.get("Protocol", "sqs"),
            "Endpoint": attributes.get("Endpoint", self.ns.arn(queue)),
            "TopicArn": self.arns.topic_arn(topic),
        }

    def list_subscriptions(self, params: Params, caller: Caller) -> Result:
        members: list[dict[str, str]] = []
        for topic in self.client.list_topics(self.ns.prefix(caller)):
            if self.ns.in_namespace(topic, caller):
                try:
                    subscribed = self.arns.subscriptions(topic)
                except TopicDoesNotExist:
                    continue
                members += [self._member(topic, q, a) for q, a in subscribed.items()]
        return paged("Subscriptions", members, params.get("NextToken"))

    def list_subscriptions_by_topic(self, params: Params, caller: Caller) -> Result:
        topic, _ = self.arns.existing(params.get("TopicArn"), caller)
        members = [self._member(topic, q, a) for q, a in self.arns.subscriptions(topic).items()]
        return paged("Subscriptions", members, params.get("NextToken"))

    def get_subscription_attributes(self, params: Params, caller: Caller) -> Result:
        topic, queue, attributes = self.arns.subscription(params.get("SubscriptionArn"), caller)
        out = {
            **self._member(topic, queue, attributes),
            "SubscriptionArn": self.arns.subscription_arn(topic, queue),
            AUTHENTICATED: "true",
            "PendingConfirmation": "false",
            "RawMessageDelivery": "false",
            # a subscription kept before its principal was: the topic's account
            PRINCIPAL: f"arn:aws:iam::{self.ns.split(topic)[1]}:root",
        }
        if attributes.get("Protocol") in HTTP_PROTOCOLS | CONFIRMED_BY_MAIL:
            out[AUTHENTICATED] = "false"  # confirmed by a token sent to the endpoint
        if attributes.get("Protocol") in HTTP_PROTOCOLS:
            settings = self.client.topic_settings(topic)
            out["EffectiveDeliveryPolicy"] = DeliveryPolicy.of(attributes, settings).to_json()
        out.update({k: v for k, v in attributes.items() if k != "Token"})
        if "FilterPolicy" in attributes:
            out.setdefault("FilterPolicyScope", "MessageAttributes")
        else:  # SNS shows the scope with a policy only (it keeps it for one set later)
            out.pop("FilterPolicyScope", None)
        return {"Attributes": Entries(out)}

    def set_subscription_attributes(self, params: Params, caller: Caller) -> Result:
        topic, queue, attributes = self.arns.subscription(params.get("SubscriptionArn"), caller)
        key, value = params.get("AttributeName"), params.get("AttributeValue", "")
        if not isinstance(value, str):
            raise invalid("AttributeValue must be a string")
        check_subscription_attribute(key, value, {**attributes, str(key): value}, self.ns)
        if key == "RedrivePolicy" and value:
            self._may_dead_letter(caller, topic, value)
            if topic.endswith(".fifo") and queue.endswith(".fifo"):
                check_fifo_redrive(value, self.ns)
        change = {str(key): stored(str(key), value) if value != "" else None}
        settings = self.client.topic_settings(topic)
        if CONFIRM + queue in settings:  # a webhook's, waiting for its confirmation
            waiting = {**json.loads(settings[CONFIRM + queue]), **change}
            kept = {k: v for k, v in waiting.items() if v is not None}
            self.client.update_topic_settings(topic, {CONFIRM + queue: json.dumps(kept)})
        elif PENDING + queue in settings:
            pending = {**json.loads(settings[PENDING + queue]), **change}
            kept = {k: v for k, v in pending.items() if v is not None}
            self.client.update_topic_settings(topic, {PENDING + queue: json.dumps(kept)})
        else:
            self.client.update_subscription(topic, queue, change)
        return {}


def delivery_info(
    arns: Arns,
    topic: str,
    queue: str,
    attributes: Mapping[str, str],
    settings: Mapping[str, str],
    kind: str = "Notification",
) -> dict[str, str]:
    """What the deliverer needs of a webhook subscription to POST a message of it."""
    delivery = DeliveryPolicy.of(attributes, settings)
    info = {
        "SnsType": kind,
        "SnsEndpoint": attributes.get("Endpoint", ""),
        "SnsTopicArn": arns.topic_arn(topic),
        "SnsDeliveryPolicy": delivery.to_json(),
    }
    if delivery.content_type is not None:
        info["SnsContentType"] = delivery.content_type
    if kind == "Notification":
        info["SnsSubscriptionArn"] = arns.subscription_arn(topic, queue)
        if attributes.get("RawMessageDelivery", "false").lower() == "true":
            info["SnsRaw"] = "true"
    policy = attributes.get("RedrivePolicy")
    if policy:
        with contextlib.suppress(SnsError):
            info["SnsDeadLetter"] = redrive_target(policy, arns.ns)
    return info
