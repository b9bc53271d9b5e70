"""SNS's topic actions: create, delete and list topics, their attributes, permissions (the
topic's Policy), data protection policy and tags, all kept in the topic's settings (tags
under `TAG`)."""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any

from ...exceptions import InvalidInput, SnsError, TopicDoesNotExist
from ...validation import check_topic_name
from ..sqs.names import Caller
from .arns import TOPIC_ARN_RE, Arns
from .attributes import (
    DELIVERY_POLICY,
    PERMISSION_ACTIONS,
    TOPIC_ATTRIBUTES,
    TOPIC_DEFAULTS,
    check_topic_attribute,
    default_policy,
    topic_policy,
)
from .pending import PENDING
from .wire import Entries, Params, Result, invalid, numbered, paged, query_map

# a topic's settings hold its attributes, its tags under TAG, and under PENDING + a queue's
# name the attributes of a subscription whose queue does not exist (sns_pending)
TAG = "tag:"
DATA_PROTECTION = "DataProtectionPolicy"
MAX_TAGS = 50
TAG_QUOTA = "Could not complete request: tag quota of per resource exceeded"


class Topics:
    """The topic actions, each answering one request."""

    def __init__(self, arns: Arns) -> None:
        self.arns = arns
        self.client = arns.client
        self.ns = arns.ns

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
        return {"TopicArn": self.arns.topic_arn(topic)}

    def delete_topic(self, params: Params, caller: Caller) -> Result:
        topic = self.arns.topic(params.get("TopicArn"), caller)
        with contextlib.suppress(TopicDoesNotExist):  # SNS: deleting a missing topic is fine
            self.client.delete_topic(topic)
        return {}

    def list_topics(self, params: Params, caller: Caller) -> Result:
        prefix = self.ns.prefix(caller)
        names = [n for n in self.client.list_topics(prefix) if self.ns.in_namespace(n, caller)]
        return paged("Topics", [{"TopicArn": self.arns.topic_arn(n)} for n in names],
                      params.get("NextToken"))  # fmt: skip

    def add_permission(self, params: Params, caller: Caller) -> Result:
        """A statement in the topic's policy allowing these accounts these actions."""
        topic, settings = self.arns.existing(params.get("TopicArn"), caller)
        label = _label(params)
        accounts = [str(a) for a in numbered(params.get("AWSAccountId"))]
        actions = [str(a) for a in numbered(params.get("ActionName"))]
        if not accounts or not actions:
            raise invalid("AWSAccountId and ActionName: at least one of each")
        arn = self.arns.topic_arn(topic)
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
        topic, settings = self.arns.existing(params.get("TopicArn"), caller)
        label = _label(params)
        if settings.get("Policy"):
            policy = topic_policy(settings, self.arns.topic_arn(topic), self.ns.split(topic)[1])
            policy["Statement"] = [st for st in policy["Statement"] if st.get("Sid") != label]
            self.client.update_topic_settings(topic, {"Policy": json.dumps(policy)})
        return {}

    def get_topic_attributes(self, params: Params, caller: Caller) -> Result:
        topic, settings = self.arns.existing(params.get("TopicArn"), caller)
        _, account, name = self.ns.split(topic)
        arn = self.arns.topic_arn(topic)
        every = self.arns.subscriptions(topic, settings)
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
        topic, _ = self.arns.existing(params.get("TopicArn"), caller)
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
        topic, _ = self.arns.existing(params.get("ResourceArn"), caller, "ResourceArn")
        value = params.get("DataProtectionPolicy")
        if not isinstance(value, str):
            raise invalid("DataProtectionPolicy Reason: no value for required parameter")
        check_topic_attribute(DATA_PROTECTION, value, topic.endswith(".fifo"))
        self.client.update_topic_settings(topic, {DATA_PROTECTION: value or None})
        return {}

    def get_data_protection_policy(self, params: Params, caller: Caller) -> Result:
        _, settings = self.arns.existing(params.get("ResourceArn"), caller, "ResourceArn")
        return {"DataProtectionPolicy": settings.get(DATA_PROTECTION, "")}

    # -- tags ----------------------------------------------------------------------------

    def _tagged(self, params: Params, caller: Caller) -> tuple[str, dict[str, str]]:
        arn = params.get("ResourceArn")
        if not isinstance(arn, str) or TOPIC_ARN_RE.fullmatch(arn) is None:
            raise SnsError("ResourceNotFound", "Resource does not exist", 404)
        try:
            return self.arns.existing(arn, caller, "ResourceArn")
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


def _label(params: Params) -> str:
    label = params.get("Label")
    if not isinstance(label, str) or not label:
        raise invalid("Label")
    return label


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
