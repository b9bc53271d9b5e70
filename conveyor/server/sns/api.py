"""The SNS API (Query protocol) over Conveyor's topics: one model for SNS, REST, SDK and CLI.

An SNS topic is a Conveyor topic, stored under its plain name in the server's default region
and account and as ``region:account:name`` in any other, like queues. Topic attributes and
tags are the topic's settings; a subscription is a queue's subscription, its attributes
(``RawMessageDelivery``, ``FilterPolicy``, ...) the subscription's. Publish routes each
message through the filter policies and delivers, in one atomic fan-out, the JSON envelope
SNS writes or the raw message (`publication`); `wire` reads and writes the Query
protocol. Only the ``sqs`` protocol is served.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import re
import secrets
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, NoReturn

from ...client import Client
from ...exceptions import (
    ConveyorError,
    InvalidInput,
    NotFound,
    QueueDoesNotExist,
    SnsError,
    TopicDoesNotExist,
)
from ...models import AttributeValue, SendResult, TypedValue
from ...queues import SendEntry
from ...validation import check_topic_name
from ..sqs.api import TRACE_PARAM
from ..sqs.message_attributes import TRACE_TYPE
from ..sqs.names import ARN_RE, Caller, Namespaces
from ..sqs.policy import BATCH as BATCH_OF
from ..sqs.policy import allows, allows_topic
from .attributes import (
    DELIVERY_POLICY,
    PERMISSION_ACTIONS,
    SUB_DEFAULTS,
    TOPIC_ATTRIBUTES,
    TOPIC_DEFAULTS,
    check_fifo_redrive,
    check_subscription_attribute,
    check_topic_attribute,
    default_policy,
    redrive_target,
    stored,
    topic_policy,
)
from .outbox import (
    CONFIRMED_BY_MAIL,
    DIRECT_SMS,
    MAX_ENDPOINT,
    OUTBOX_PREFIX,
    OUTBOX_PROTOCOLS,
    PHONE_RE,
    TEXT_PROTOCOLS,
    check_endpoint,
    outbox_attributes,
)
from .pending import PENDING
from .publication import (
    MAX_MESSAGE,
    Publication,
    copy_id,
    envelope,
    passes,
    read_publication,
    timestamp,
    topic_sequence,
)
from .signing import Signer
from .webhooks import (
    CONFIRM,
    DELIVERY_PREFIX,
    HTTP_PROTOCOLS,
    TOPIC_TAG,
    DeliveryPolicy,
    EndpointRules,
)
from .wire import Entries, invalid, not_found, numbered, query_map

TOPIC_ARN_RE = re.compile(
    r"arn:aws[a-z-]*:sns:([a-z0-9-]{1,32}):([0-9]{12}):([A-Za-z0-9_-]{1,256}(?:\.fifo)?)"
)
SUBSCRIPTION_ARN_RE = re.compile(TOPIC_ARN_RE.pattern + r":([0-9a-f-]{36})")
SUBSCRIPTIONS = uuid.UUID("6f1c1d2e-5b0c-4e55-9a43-6c0e8c5a7d10")
MAX_BATCH = 10
MAX_TAGS = 50
PAGE = 100
TAG_QUOTA = "Could not complete request: tag quota of per resource exceeded"
# a topic's settings hold its attributes, its tags under TAG, and under PENDING + a queue's
# name the attributes of a subscription whose queue does not exist (sns_pending)
TAG = "tag:"
DATA_PROTECTION = "DataProtectionPolicy"
PRINCIPAL = "SubscriptionPrincipal"  # who subscribed, kept with the subscription
AUTHENTICATED = "ConfirmationWasAuthenticated"  # confirmed with AuthenticateOnUnsubscribe

# every protocol SNS knows (this server delivers to `sqs`, `http` and `https`)
SNS_PROTOCOLS = frozenset(
    {"http", "https", "email", "email-json", "sms", "sqs", "application", "lambda", "firehose"}
)
Params = dict[str, Any]
Result = dict[str, Any]


class SnsApi:
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
        self.ns = namespaces or Namespaces()
        self.signer = signer or Signer(client)
        self.endpoints = endpoints or EndpointRules()
        self.outbox = outbox  # the protocols kept in outboxes (sns_outbox)
        self.actions: dict[str, Callable[[Params, Caller], Result]] = {
            action: getattr(self, method) for action, method in METHODS.items()
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

    # -- names ----------------------------------------------------------------------------

    def topic_arn(self, stored: str) -> str:
        region, account, name = self.ns.split(stored)
        return f"arn:aws:sns:{region}:{account}:{name}"

    def _topic(self, arn: Any, caller: Caller, param: str = "TopicArn") -> str:
        """The stored name of the topic an ARN names (which need not exist)."""
        match = TOPIC_ARN_RE.fullmatch(arn) if isinstance(arn, str) else None
        if match is None:
            _check_arn_parts(param, arn if isinstance(arn, str) else "")
            raise invalid(f"{param}: {arn!r} is not a topic ARN (arn:aws:sns:REGION:ACCOUNT:NAME)")
        topic = self.ns.store_name(match.group(1), match.group(2), match.group(3))
        self._may_call(caller, topic, match.group(2), arn)
        if match.group(1) != caller.region:
            raise invalid(param)  # another region's topic, asked of this region's endpoint
        return topic

    def _may_call(self, caller: Caller, topic: str, account: str, arn: str) -> None:
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
        _refuse(caller, arn)

    def _existing(
        self, arn: Any, caller: Caller, param: str = "TopicArn"
    ) -> tuple[str, dict[str, str]]:
        topic = self._topic(arn, caller, param)
        try:
            return topic, self.client.topic_settings(topic)
        except (TopicDoesNotExist, InvalidInput):
            raise not_found("Topic does not exist") from None

    def subscription_arn(self, topic: str, queue: str) -> str:
        key = uuid.uuid5(SUBSCRIPTIONS, f"{topic}\n{queue}")
        return f"{self.topic_arn(topic)}:{key}"

    def _subscription(self, arn: Any, caller: Caller) -> tuple[str, str, dict[str, str]]:
        """(topic, queue, attributes) of a subscription ARN; NotFound if there is none."""
        match = SUBSCRIPTION_ARN_RE.fullmatch(arn) if isinstance(arn, str) else None
        if match is None:  # in SNS's words
            if not isinstance(arn, str):
                raise invalid("SubscriptionArn Reason: no value for required parameter")
            _check_arn_parts("SubscriptionArn", arn)
            raise invalid("SubscriptionId")
        topic = self.ns.store_name(match.group(1), match.group(2), match.group(3))
        # another account's subscription: its subscriber's (or the topic owner's) to act on
        foreign = caller.verified and match.group(2) != caller.account
        try:
            subscriptions = self._subscriptions(topic)
        except (TopicDoesNotExist, InvalidInput):
            if foreign:
                _refuse(caller, arn)
            raise not_found("Subscription does not exist") from None
        for queue, attributes in subscriptions.items():
            if self.subscription_arn(topic, queue) == arn:
                if foreign and _account_of(attributes.get(PRINCIPAL)) != caller.account:
                    _refuse(caller, arn)
                return topic, queue, attributes
        if foreign:
            _refuse(caller, arn)
        raise not_found("Subscription does not exist")

    # -- topics ---------------------------------------------------------------------------

    def create_topic(self, params: Params, caller: Caller) -> Result:
        name = params.get("Name")
        if not isinstance(name, str) or not name:
            raise invalid("Topic Name")
        attributes = query_map(params.get("Attributes"), "key", "value")
        for key in attributes:
            if key not in TOPIC_ATTRIBUTES:
                raise invalid(f"AttributeName: {key} is not a topic attribute")
        fifo = attributes.get("FifoTopic", "false").lower() == "true"
        if fifo != name.endswith(".fifo") or not re.fullmatch(
            r"[A-Za-z0-9_-]{1,256}" if not fifo else r"[A-Za-z0-9_-]{1,251}\.fifo", name
        ):
            raise invalid("Topic Name")
        if fifo:
            attributes["FifoTopic"] = "true"
            attributes.setdefault("ContentBasedDeduplication", "false")
        else:
            attributes.pop("FifoTopic", None)  # a standard topic does not show it
        for key, value in attributes.items():
            check_topic_attribute(key, value, fifo)
        tags = _tags(params.get("Tags"))
        topic = self.ns.store_name(caller.region, caller.account, name)
        try:
            check_topic_name(topic)
        except InvalidInput as exc:
            raise invalid(f"Topic Name: {exc.message}") from None
        created = self.client.create_topic(topic)
        current = self.client.topic_settings(topic)
        if not created:
            defaults = TOPIC_DEFAULTS if not fifo else {**TOPIC_DEFAULTS, "FifoTopic": "true"}
            if any(current.get(k, defaults.get(k, "")) != v for k, v in attributes.items()):
                raise invalid("Attributes Reason: Topic already exists with different attributes")
            if any(current.get(TAG + k) != v for k, v in tags.items()):
                raise invalid("Tags Reason: Topic already exists with different tags")
        changes: dict[str, str | None] = {**attributes, **{TAG + k: v for k, v in tags.items()}}
        if changes:
            settings = self.client.update_topic_settings(topic, changes)
            if sum(1 for k in settings if k.startswith(TAG)) > MAX_TAGS:
                raise SnsError("TagLimitExceeded", TAG_QUOTA)
        return {"TopicArn": self.topic_arn(topic)}

    def delete_topic(self, params: Params, caller: Caller) -> Result:
        topic = self._topic(params.get("TopicArn"), caller)
        with contextlib.suppress(TopicDoesNotExist):  # SNS: deleting a missing topic is fine
            self.client.delete_topic(topic)
        return {}

    def list_topics(self, params: Params, caller: Caller) -> Result:
        prefix = self.ns.prefix(caller)
        names = [n for n in self.client.list_topics(prefix) if self.ns.in_namespace(n, caller)]
        return _paged("Topics", [{"TopicArn": self.topic_arn(n)} for n in names],
                      params.get("NextToken"))  # fmt: skip

    def add_permission(self, params: Params, caller: Caller) -> Result:
        """A statement in the topic's policy allowing these accounts these actions."""
        topic, settings = self._existing(params.get("TopicArn"), caller)
        label = _label(params)
        accounts = [str(a) for a in numbered(params.get("AWSAccountId"))]
        actions = [str(a) for a in numbered(params.get("ActionName"))]
        if not accounts or not actions:
            raise invalid("AWSAccountId and ActionName: at least one of each")
        arn = self.topic_arn(topic)
        policy = topic_policy(settings, arn, self.ns.split(topic)[1])
        if any(st.get("Sid") == label for st in policy["Statement"]):
            raise invalid("Statement already exists")
        if any(a not in PERMISSION_ACTIONS for a in actions):
            raise invalid("Policy statement action out of service scope!")
        principals = [f"arn:aws:iam::{a}:root" for a in accounts]
        granted = [f"SNS:{a}" for a in actions]
        policy["Statement"].append(
            {
                "Sid": label,
                "Effect": "Allow",
                "Principal": {"AWS": principals[0] if len(principals) == 1 else principals},
                "Action": granted[0] if len(granted) == 1 else granted,
                "Resource": arn,
            }
        )
        self.client.update_topic_settings(topic, {"Policy": json.dumps(policy)})
        return {}

    def remove_permission(self, params: Params, caller: Caller) -> Result:
        topic, settings = self._existing(params.get("TopicArn"), caller)
        label = _label(params)
        if settings.get("Policy"):
            policy = topic_policy(settings, self.topic_arn(topic), self.ns.split(topic)[1])
            policy["Statement"] = [st for st in policy["Statement"] if st.get("Sid") != label]
            self.client.update_topic_settings(topic, {"Policy": json.dumps(policy)})
        return {}

    def get_topic_attributes(self, params: Params, caller: Caller) -> Result:
        topic, settings = self._existing(params.get("TopicArn"), caller)
        _, account, name = self.ns.split(topic)
        arn = self.topic_arn(topic)
        every = self._subscriptions(topic, settings)
        pending = sum(1 for a in every.values() if a.get("PendingConfirmation") == "true")
        out = {
            "TopicArn": arn,
            "Owner": account,
            "Policy": default_policy(arn, account),
            "DisplayName": "",
            "SubscriptionsConfirmed": str(len(every) - pending),
            "SubscriptionsPending": str(pending),
            "SubscriptionsDeleted": "0",
            "EffectiveDeliveryPolicy": json.dumps(DELIVERY_POLICY, separators=(",", ":")),
        }
        if name.endswith(".fifo"):
            out["FifoTopic"] = "true"
            out["ContentBasedDeduplication"] = "false"
        out.update({k: v for k, v in settings.items() if not k.startswith((TAG, PENDING))})
        out.pop(DATA_PROTECTION, None)  # as SNS: GetDataProtectionPolicy shows it
        return {"Attributes": Entries(out)}

    def set_topic_attributes(self, params: Params, caller: Caller) -> Result:
        topic, _ = self._existing(params.get("TopicArn"), caller)
        key, value = params.get("AttributeName"), params.get("AttributeValue", "")
        if not isinstance(key, str) or key not in TOPIC_ATTRIBUTES:
            raise invalid(f"AttributeName: {key!r} is not a topic attribute")
        fifo = topic.endswith(".fifo")
        if key == "FifoTopic":
            raise invalid("AttributeName")  # FifoTopic cannot change: SNS says no more
        check_topic_attribute(key, value, fifo)
        self.client.update_topic_settings(topic, {key: value if value != "" else None})
        return {}

    def put_data_protection_policy(self, params: Params, caller: Caller) -> Result:
        """Keep a topic's data protection policy (a JSON document; kept, not applied)."""
        topic, _ = self._existing(params.get("ResourceArn"), caller, "ResourceArn")
        value = params.get("DataProtectionPolicy")
        if not isinstance(value, str):
            raise invalid("DataProtectionPolicy Reason: no value for required parameter")
        check_topic_attribute(DATA_PROTECTION, value, topic.endswith(".fifo"))
        self.client.update_topic_settings(topic, {DATA_PROTECTION: value or None})
        return {}

    def get_data_protection_policy(self, params: Params, caller: Caller) -> Result:
        _, settings = self._existing(params.get("ResourceArn"), caller, "ResourceArn")
        return {"DataProtectionPolicy": settings.get(DATA_PROTECTION, "")}

    # -- subscriptions --------------------------------------------------------------------

    def subscribe(self, params: Params, caller: Caller) -> Result:
        topic, _ = self._existing(params.get("TopicArn"), caller)
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
        current = self._subscriptions(topic)
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
        return {"SubscriptionArn": self.subscription_arn(topic, queue)}

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
        if not allows_topic(policy, self.topic_arn(topic), endpoint):
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
        arn = self.subscription_arn(topic, queue)
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
            f"You have chosen to subscribe to the topic {self.topic_arn(topic)}.\nTo confirm"
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
        text = (
            f"You have chosen to deactivate subscription {self.subscription_arn(topic, queue)}."
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
        topic_arn = self.topic_arn(topic)
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
            info = self._delivery(topic, queue, attributes, settings, message["Type"])
            info["SnsMessageId"] = message["MessageId"]
            sent = {"Sns": json.dumps(info)}
        self.client.queue(queue).send(json.dumps(message, indent=2), attributes=sent)

    def _delivery(
        self,
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
            "SnsTopicArn": self.topic_arn(topic),
            "SnsDeliveryPolicy": delivery.to_json(),
        }
        if delivery.content_type is not None:
            info["SnsContentType"] = delivery.content_type
        if kind == "Notification":
            info["SnsSubscriptionArn"] = self.subscription_arn(topic, queue)
            if attributes.get("RawMessageDelivery", "false").lower() == "true":
                info["SnsRaw"] = "true"
        policy = attributes.get("RedrivePolicy")
        if policy:
            with contextlib.suppress(SnsError):
                info["SnsDeadLetter"] = redrive_target(policy, self.ns)
        return info

    def _may_dead_letter(self, caller: Caller, topic: str, redrive_policy: str) -> None:
        """A subscription's dead-letter queue in another account: as its queue."""
        target = redrive_target(redrive_policy, self.ns)
        self._may_deliver(caller, topic, target, self.ns.arn(target))

    def _subscriptions(
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

    def _promote(self, topic: str, settings: Mapping[str, str]) -> dict[str, dict[str, str]]:
        """Subscribe for real the waiting subscriptions whose queue now exists; the others,
        queue to attributes."""
        waiting: dict[str, dict[str, str]] = {}
        for key, value in settings.items():
            if key.startswith(PENDING):
                queue, attributes = key[len(PENDING) :], json.loads(value)
                try:
                    self.client.subscribe(topic, queue, attributes)
                except QueueDoesNotExist:
                    waiting[queue] = attributes
                    continue
                self.client.update_topic_settings(topic, {key: None})
        return waiting

    def confirm_subscription(self, params: Params, caller: Caller) -> Result:
        """Confirm the webhook subscription a token was sent for. As SNS: the token decides
        (a TopicArn of the right region but another topic still confirms it), and
        confirming again answers the subscription's ARN."""
        try:  # its ARN first: malformed, or another region's, is SNS's "Topic"
            named = self._topic(params.get("TopicArn"), caller)
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
                    return {"SubscriptionArn": self.subscription_arn(topic, queue)}
            for key, value in settings.items():
                waiting = json.loads(value) if key.startswith(CONFIRM) else {}
                if waiting.get("Token") == token:
                    queue = key[len(CONFIRM) :]
                    waiting.pop("PendingConfirmation", None)
                    if str(params.get("AuthenticateOnUnsubscribe", "")).lower() == "true":
                        waiting[AUTHENTICATED] = "true"
                    self.client.subscribe(topic, queue, waiting)  # the token kept: idempotent
                    self.client.update_topic_settings(topic, {key: None})
                    return {"SubscriptionArn": self.subscription_arn(topic, queue)}
        # SQS subscriptions are confirmed when made: no token is pending for them
        raise invalid("Token")

    def unsubscribe(self, params: Params, caller: Caller) -> Result:
        try:
            topic, queue, attributes = self._subscription(params.get("SubscriptionArn"), caller)
        except SnsError as exc:
            if exc.code == "NotFound":
                return {}  # SNS: unsubscribing twice is no error
            raise
        if attributes.get(AUTHENTICATED) == "true" and not caller.scoped:
            # confirmed with AuthenticateOnUnsubscribe: an unsigned request (the
            # UnsubscribeURL's GET) may not end it
            _refuse(caller, str(params.get("SubscriptionArn")))
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
                "PendingConfirmation" if pending else self.subscription_arn(topic, queue)
            ),
            # the account that subscribed (the topic's, for subscriptions kept before that was)
            "Owner": _account_of(attributes.get(PRINCIPAL)) or self.ns.split(topic)[1],
            "Protocol": attributes.get("Protocol", "sqs"),
            "Endpoint": attributes.get("Endpoint", self.ns.arn(queue)),
            "TopicArn": self.topic_arn(topic),
        }

    def list_subscriptions(self, params: Params, caller: Caller) -> Result:
        members: list[dict[str, str]] = []
        for topic in self.client.list_topics(self.ns.prefix(caller)):
            if self.ns.in_namespace(topic, caller):
                try:
                    subscribed = self._subscriptions(topic)
                except TopicDoesNotExist:
                    continue
                members += [self._member(topic, q, a) for q, a in subscribed.items()]
        return _paged("Subscriptions", members, params.get("NextToken"))

    def list_subscriptions_by_topic(self, params: Params, caller: Caller) -> Result:
        topic, _ = self._existing(params.get("TopicArn"), caller)
        members = [self._member(topic, q, a) for q, a in self._subscriptions(topic).items()]
        return _paged("Subscriptions", members, params.get("NextToken"))

    def get_subscription_attributes(self, params: Params, caller: Caller) -> Result:
        topic, queue, attributes = self._subscription(params.get("SubscriptionArn"), caller)
        out = {
            **self._member(topic, queue, attributes),
            "SubscriptionArn": self.subscription_arn(topic, queue),
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
        topic, queue, attributes = self._subscription(params.get("SubscriptionArn"), caller)
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

    # -- publishing -----------------------------------------------------------------------

    def publish(self, params: Params, caller: Caller) -> Result:
        if params.get("PhoneNumber") is not None:
            return self._publish_sms(params, params["PhoneNumber"], caller)
        target = "TopicArn" if "TopicArn" in params else "TargetArn"
        arn = params.get(target)
        if arn is None:
            raise invalid("TopicArn or TargetArn Reason: no value for required parameter")
        if target == "TargetArn" and (not isinstance(arn, str) or not TOPIC_ARN_RE.fullmatch(arn)):
            # an application endpoint's ARN, which this server has none of: in SNS's words
            raise invalid("TargetArn Reason: No endpoint found for the target arn specified")
        topic, settings = self._existing(arn, caller, target)
        entry = read_publication(params, topic, settings)
        result = self._deliver(topic, settings, entry, caller, params.get(TRACE_PARAM))
        out: Result = {"MessageId": result.id}
        if topic.endswith(".fifo"):
            out["SequenceNumber"] = _sequence(result)
        return out

    def _publish_sms(self, params: Params, phone: Any, caller: Caller) -> Result:
        """A text to one phone number: kept in the caller's direct-SMS outbox where the
        operator keeps SMS (--sns-outbox sms); this server sends none."""
        if not isinstance(phone, str) or not PHONE_RE.fullmatch(phone):
            raise invalid(f"PhoneNumber Reason: {phone} is not valid to publish to")
        if "sms" not in self.outbox:
            raise invalid(
                "PhoneNumber Reason: this server sends no SMS; it keeps them where its"
                " operator names sms with --sns-outbox"
            )
        p = read_publication(params, "", {})
        queue = self.ns.store_name(caller.region, caller.account, DIRECT_SMS)
        self.client.create_queue(queue)
        sent = self.client.queue(queue).send(
            p.body_for("sms"), attributes=outbox_attributes("sms", phone)
        )
        return {"MessageId": sent.id}

    def publish_batch(self, params: Params, caller: Caller) -> Result:
        topic, settings = self._existing(params.get("TopicArn"), caller)
        entries = numbered(params.get("PublishBatchRequestEntries"))
        if not entries:
            raise SnsError("EmptyBatchRequest", "The batch request doesn't contain any entries.")
        if len(entries) > MAX_BATCH:
            raise SnsError(
                "TooManyEntriesInBatchRequest",
                "The batch request contains more entries than permissible.",
            )
        ids = [e.get("Id") if isinstance(e, dict) else None for e in entries]
        for entry_id in ids:
            _check_entry_id(entry_id)
        if len(set(ids)) != len(ids):
            raise SnsError(
                "BatchEntryIdsNotDistinct",
                "Two or more batch entries in the request have the same Id.",
            )
        # an entry SNS refuses fails the whole request, before anything is published
        publications = [
            read_publication(raw, topic, settings, place) for place, raw in enumerate(entries, 1)
        ]
        if sum(p.size for p in publications) > MAX_MESSAGE:  # messages with their attributes
            raise SnsError(
                "BatchRequestTooLong",
                "The length of all the messages put together is more than the limit.",
            )
        successful: list[dict[str, str]] = []
        failed: list[dict[str, str]] = []
        trace = params.get(TRACE_PARAM)
        for raw, publication in zip(entries, publications, strict=True):
            entry_id = str(raw["Id"])
            try:
                result = self._deliver(topic, settings, publication, caller, trace)
            except SnsError as exc:
                failed.append(_failure(entry_id, exc.code, exc.message, exc.sender_fault))
                continue
            except (InvalidInput, NotFound) as exc:
                failed.append(_failure(entry_id, "InvalidParameter", exc.message, True))
                continue
            item = {"Id": entry_id, "MessageId": result.id}
            if topic.endswith(".fifo"):
                item["SequenceNumber"] = _sequence(result)
            successful.append(item)
        return {"Successful": successful, "Failed": failed}

    # -- STS ------------------------------------------------------------------------------

    def caller_identity(self, params: Params, caller: Caller) -> Result:
        """STS GetCallerIdentity, which SDK programs ask to learn their account for ARNs."""
        return {
            "UserId": caller.user or caller.account,
            "Account": caller.account,
            "Arn": caller.principal,
        }

    # -- tags -----------------------------------------------------------------------------

    def _tagged(self, params: Params, caller: Caller) -> tuple[str, dict[str, str]]:
        arn = params.get("ResourceArn")
        if not isinstance(arn, str) or TOPIC_ARN_RE.fullmatch(arn) is None:
            raise SnsError("ResourceNotFound", "Resource does not exist", 404)
        try:
            return self._existing(arn, caller, "ResourceArn")
        except SnsError as exc:
            if exc.code == "NotFound":
                raise SnsError("ResourceNotFound", "Resource does not exist", 404) from None
            raise

    def tag_resource(self, params: Params, caller: Caller) -> Result:
        topic, settings = self._tagged(params, caller)
        tags = _tags(params.get("Tags"))
        if not tags:
            raise invalid("Tags Reason: no tags given")
        existing = {k for k in settings if k.startswith(TAG)}
        if len(existing | {TAG + k for k in tags}) > MAX_TAGS:
            raise SnsError("TagLimitExceeded", TAG_QUOTA)
        self.client.update_topic_settings(topic, {TAG + k: v for k, v in tags.items()})
        return {}

    def untag_resource(self, params: Params, caller: Caller) -> Result:
        topic, _ = self._tagged(params, caller)
        keys = numbered(params.get("TagKeys"))
        if not all(isinstance(k, str) for k in keys):
            raise invalid("TagKeys: a list of tag keys")
        self.client.update_topic_settings(topic, {TAG + k: None for k in keys})
        return {}

    def list_tags(self, params: Params, caller: Caller) -> Result:
        _, settings = self._tagged(params, caller)
        tags = sorted((k[len(TAG) :], v) for k, v in settings.items() if k.startswith(TAG))
        return {"Tags": [{"Key": k, "Value": v} for k, v in tags]}

    def _deliver(
        self,
        topic: str,
        settings: Mapping[str, str],
        p: Publication,
        caller: Caller,
        trace: Any = None,
    ) -> SendResult:
        """Route a publication through the subscriptions' filter policies and deliver it (with
        the request's X-Ray `trace` header as each copy's AWSTraceHeader, as SNS passes it)."""
        traced: dict[str, AttributeValue] = (
            {"AWSTraceHeader": TypedValue(TRACE_TYPE, trace)} if isinstance(trace, str) else {}
        )
        mid = str(uuid.uuid4())
        waiting = self._promote(topic, settings)
        now = datetime.now(UTC)
        sequence = topic_sequence(now) if topic.endswith(".fifo") else None
        arn, text = self.topic_arn(topic), p.body_for("sqs")
        raw_attributes = {**p.attributes, **traced}
        signature: dict[str, Any] = {}  # one for every copy: what is signed is the same

        def sign(message: dict[str, Any]) -> dict[str, Any]:
            if not signature:
                version = settings.get("SignatureVersion", "1")
                self.signer.sign(message, version, caller.base_url)
                keys = ("SignatureVersion", "Signature", "SigningCertURL")
                signature.update((k, message[k]) for k in keys)
            else:
                message.update(signature)
            return message

        def copy(queue: str, attributes: Mapping[str, str], to: str) -> SendEntry:
            """The copy subscription (`queue`, `attributes`) gets, sent to queue `to`."""
            raw = attributes.get("RawMessageDelivery", "false").lower() == "true"
            fifo = queue.endswith(".fifo")  # a FIFO topic delivers to standard queues too
            protocol = attributes.get("Protocol", "sqs")
            webhook = protocol in HTTP_PROTOCOLS
            if protocol in TEXT_PROTOCOLS:  # an outbox's: what the endpoint would read
                body, sent_attributes = p.body_for(protocol), {}
            elif raw:
                body, sent_attributes = text, raw_attributes
            else:  # an envelope names its subscription: one each
                sub = self.subscription_arn(topic, queue)
                said = p.body_for(protocol) if protocol in OUTBOX_PROTOCOLS else text
                body = envelope(mid, arn, p, said, caller, topic, sub, now, sign, sequence)
                sent_attributes = traced
            if webhook:  # what its POST needs, in its delivery queue
                info = self._delivery(topic, queue, attributes, settings)
                info["SnsMessageId"] = mid
                sent_attributes = {"Sns": json.dumps(info)}
            elif protocol in OUTBOX_PROTOCOLS:
                sent_attributes = outbox_attributes(protocol, attributes["Endpoint"])
            return SendEntry(  # each copy has an SQS message id of its own
                entry_id="0",
                body=body,
                id=copy_id(mid, to),
                attributes=sent_attributes,
                # a FIFO topic's group stays out of standard queues; a standard topic's goes on
                group_id=p.group_id if fifo or not topic.endswith(".fifo") else None,
                dedup_id=p.dedup_id if fifo else None,
            )

        subscribed = self.client.subscriptions(topic)
        copies = {
            queue: copy(queue, attributes, queue)
            for queue, attributes in subscribed.items()
            if passes(attributes, p)
        }
        for queue, attributes in waiting.items():  # its queue is gone: to its dead letters
            self._dead_letter(queue, attributes, p, copy)
        if not copies:
            return SendResult(id=mid, sequence=sequence)
        try:
            results = self.client.publish_copies(topic, copies)
        except (InvalidInput, QueueDoesNotExist):
            # a queue refused its copy (too long for it, say) or went: as on SNS the publish
            # stands, and that delivery goes to the subscription's dead-letter queue
            for queue in self._refused(copies):
                del copies[queue]
                self._dead_letter(queue, subscribed[queue], p, copy)
            if not copies:
                return SendResult(id=mid, sequence=sequence)
            results = self.client.publish_copies(topic, copies)
        for queue, result in results.items():
            if result.duplicate:  # a FIFO queue holds the first publish's copy: its id
                return dataclasses.replace(result, id=copy_id(result.id, queue))
        return SendResult(id=mid, sequence=sequence)

    def _refused(self, copies: Mapping[str, SendEntry]) -> list[str]:
        """The queues that refuse their copies (or are gone)."""
        refused = []
        for queue, entry in copies.items():
            try:
                self.client.queue(queue).prepare(entry)
            except (InvalidInput, QueueDoesNotExist):
                refused.append(queue)
        return refused

    def _dead_letter(
        self,
        queue: str,
        attributes: Mapping[str, str],
        p: Publication,
        copy: Callable[[str, Mapping[str, str], str], SendEntry],
    ) -> None:
        """A publication for a subscription whose queue does not exist, or refuses it, goes
        to the subscription's dead-letter queue (its RedrivePolicy), as it would have gone
        to the queue; without one, or if that queue is gone or refuses it too, it is lost,
        as on SNS."""
        policy = attributes.get("RedrivePolicy")
        if not policy or not passes(attributes, p):
            return
        try:
            target = redrive_target(policy, self.ns)
            entry = copy(queue, attributes, f"{queue}\n{target}")
            self.client.queue(target).send(
                entry.body,
                id=entry.id,
                group_id=entry.group_id,
                dedup_id=entry.dedup_id,
                attributes=entry.attributes,
            )
        except ConveyorError:  # the dead-letter queue is gone, or refuses the copy
            return


def _refuse(caller: Caller, arn: str) -> NoReturn:
    raise SnsError(
        "AuthorizationError",
        f"User: {caller.principal} is not authorized to perform:"
        f" SNS:{caller.action or 'request'} on resource: {arn}",
        403,
    )


def _account_of(principal: str | None) -> str | None:
    """The account of an IAM ARN (`arn:aws:iam::ACCOUNT:...`)."""
    parts = (principal or "").split(":")
    return parts[4] if len(parts) > 5 and parts[2] == "iam" else None


def _check_entry_id(entry_id: object) -> None:
    """A PublishBatch entry's Id, as SNS checks it: 1-80 letters, digits, `-` and `_`."""
    if not isinstance(entry_id, str) or not entry_id:
        raise SnsError(
            "InvalidBatchEntryId", "The Id of a batch entry in the batch request is empty."
        )
    if len(entry_id) > 80:
        raise SnsError(
            "InvalidBatchEntryId",
            f"The Id of a batch entry in the batch request is too long: {entry_id}",
        )
    if not re.fullmatch(r"[A-Za-z0-9_-]+", entry_id):
        raise SnsError(
            "InvalidBatchEntryId",
            "The Id of a batch entry in the batch request contains an impermissible character:"
            f" {entry_id}",
        )


def _sequence(result: SendResult) -> str:
    if result.sequence is not None:
        return str(result.sequence).rjust(20, "0")
    return str(int(datetime.now(UTC).timestamp() * 1_000_000)).rjust(20, "0")


def _failure(entry_id: str, code: str, message: str, sender: bool) -> dict[str, str]:
    return {"Id": entry_id, "Code": code, "Message": message, "SenderFault": str(sender).lower()}


# -- parameters ---------------------------------------------------------------------------


def _label(params: Params) -> str:
    label = params.get("Label")
    if not isinstance(label, str) or not label:
        raise invalid("Label")
    return label


def _check_arn_parts(param: str, arn: str) -> None:
    """An ARN of fewer than six parts, refused in SNS's words."""
    parts = len(arn.split(":"))
    if parts < 6:
        raise invalid(f"{param} Reason: An ARN must have at least 6 elements, not {parts}")


def _tags(node: Any) -> dict[str, str]:
    tags: dict[str, str] = {}
    for item in numbered(node):
        if not isinstance(item, dict) or not isinstance(item.get("Key"), str):
            raise invalid("Tags: each tag needs a Key and a Value")
        key, value = item["Key"], item.get("Value", "")
        if not 1 <= len(key) <= 128 or not isinstance(value, str) or len(value) > 256:
            raise invalid("Tags: keys are 1-128 characters, values at most 256")
        if key in tags:
            raise invalid("Duplicated keys are not allowed.")
        tags[key] = value
    if len(tags) > MAX_TAGS:
        raise SnsError("TagLimitExceeded", TAG_QUOTA)
    return tags


def _paged(key: str, items: list[Any], token: Any) -> Result:
    """`PAGE` of `items` under `key`, from where `token` says, with the next token if more
    (opaque, base64 as SNS's are)."""
    start = 0
    if token is not None:
        try:
            start = int(base64.b64decode(str(token), validate=True).decode())
        except (ValueError, UnicodeDecodeError):
            raise invalid("NextToken: not a token this server gave") from None
        if start < 0:
            raise invalid("NextToken: not a token this server gave")
    result: Result = {key: items[start : start + PAGE]}
    if start + PAGE < len(items):
        result["NextToken"] = base64.b64encode(str(start + PAGE).encode()).decode()
    return result


METHODS = {
    "CreateTopic": "create_topic",
    "DeleteTopic": "delete_topic",
    "ListTopics": "list_topics",
    "GetTopicAttributes": "get_topic_attributes",
    "SetTopicAttributes": "set_topic_attributes",
    "Subscribe": "subscribe",
    "ConfirmSubscription": "confirm_subscription",
    "Unsubscribe": "unsubscribe",
    "ListSubscriptions": "list_subscriptions",
    "ListSubscriptionsByTopic": "list_subscriptions_by_topic",
    "GetSubscriptionAttributes": "get_subscription_attributes",
    "SetSubscriptionAttributes": "set_subscription_attributes",
    "Publish": "publish",
    "PublishBatch": "publish_batch",
    "AddPermission": "add_permission",
    "RemovePermission": "remove_permission",
    "TagResource": "tag_resource",
    "UntagResource": "untag_resource",
    "ListTagsForResource": "list_tags",
    "GetCallerIdentity": "caller_identity",
    "PutDataProtectionPolicy": "put_data_protection_policy",
    "GetDataProtectionPolicy": "get_data_protection_policy",
}
"""The SNS actions served, by the SnsApi method that answers each."""
ACTIONS = frozenset(METHODS)
"""The actions the SNS API serves: a request for one of them without an SQS signature goes
to SNS."""
