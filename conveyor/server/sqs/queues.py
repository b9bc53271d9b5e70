"""The SQS API's queue actions: create, delete, list and find queues, their attributes and
tags, dead-letter sources, and the permissions AddPermission writes into a queue's Policy."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from ...client import Client
from ...exceptions import (
    InvalidInput,
    InvalidName,
    MissingParameter,
    OverLimit,
    QueueDoesNotExist,
    QueueExists,
)
from ...models import QueueAttributes
from ..sns.pending import keep_subscriptions
from . import attributes as sqs_attributes
from .names import Caller, Namespaces
from .params import Params, Result, int_param, list_param, require
from .reach import Reach

# what AddPermission may grant another account (the rest is the owner's alone)
DELEGABLE = frozenset(
    {
        "*",
        "ChangeMessageVisibility",
        "DeleteMessage",
        "GetQueueAttributes",
        "GetQueueUrl",
        "ListDeadLetterSourceQueues",
        "PurgeQueue",
        "ReceiveMessage",
        "SendMessage",
    }
)


def _one_or_list(values: list[str]) -> str | list[str]:
    """As SQS writes a policy: one value alone, several as a list."""
    return values[0] if len(values) == 1 else values


class QueueActions:
    """The queue actions, each answering one request (called in the thread pool)."""

    def __init__(self, client: Client, namespaces: Namespaces, reach: Reach) -> None:
        self.client = client
        self.ns = namespaces
        self.reach = reach

    def create_queue(self, params: Params, caller: Caller) -> Result:
        given = params.get("QueueName")
        try:
            if given == "" or (isinstance(given, str) and len(given) > 80):
                raise InvalidName(given)
            name = self.ns.from_name(caller, require(params, "QueueName"))
        except InvalidName:
            raise InvalidInput(sqs_attributes.STANDARD_NAME) from None
        changes = sqs_attributes.attribute_changes(
            params.get("Attributes") or {},
            name=name,
            current=None,
            ns=self.ns,
            lookup=self.client.queue_info,
        )
        tags = params.get("tags") or params.get("Tags") or {}
        if tags:
            changes["tags"] = sqs_attributes.tags(tags)
        try:
            existing = self.client.queue_info(name, fresh=True)
        except QueueDoesNotExist:
            existing = None
        if existing is not None:
            differs = sqs_attributes.mismatch(existing.attributes, changes)
            if differs is not None:
                raise QueueExists(
                    "A queue already exists with the same name and a different value for"
                    f" attribute {differs}"
                )
        else:
            self.client.create_queue(name, QueueAttributes(fifo=name.endswith(".fifo")), **changes)
        return {"QueueUrl": self.ns.url(caller, name)}

    def delete_queue(self, params: Params, caller: Caller) -> Result:
        queue = self.reach.queue(params, caller)
        keep_subscriptions(self.client, queue)  # as SNS: a subscription outlives its queue
        self.client.delete_queue(queue)
        return {}

    def list_queues(self, params: Params, caller: Caller) -> Result:
        prefix = params.get("QueueNamePrefix") or ""
        if not isinstance(prefix, str):
            raise InvalidInput("QueueNamePrefix must be a string")
        limit = int_param(params, "MaxResults", 1, 1000)
        names = [
            n
            for n in self.client.list_queues(self.ns.prefix(caller) + prefix)
            if self.ns.in_namespace(n, caller)
        ]
        return self._page(names, params, limit, "QueueUrls", caller)

    def _page(
        self, names: list[str], params: Params, limit: int | None, key: str, caller: Caller
    ) -> Result:
        names.sort()
        token = params.get("NextToken")
        if token:
            try:
                after = base64.urlsafe_b64decode(str(token)).decode()
            except (binascii.Error, UnicodeDecodeError, ValueError):
                raise InvalidInput("Invalid NextToken value.") from None
            names = [n for n in names if n > after]
        out: Result = {}
        page = names[: limit or 1000]
        if page or key != "QueueUrls":  # SQS leaves out an empty ListQueues list
            out[key] = [self.ns.url(caller, n) for n in page]
        if limit is not None and len(names) > limit:
            out["NextToken"] = base64.urlsafe_b64encode(page[-1].encode()).decode()
        return out

    def get_queue_url(self, params: Params, caller: Caller) -> Result:
        name = self.ns.from_name(
            caller, require(params, "QueueName"), params.get("QueueOwnerAWSAccountId")
        )
        self.reach.reachable(name, caller)
        self.client.queue_info(name, fresh=True)
        return {"QueueUrl": self.ns.url(caller, name)}

    def get_queue_attributes(self, params: Params, caller: Caller) -> Result:
        name = self.reach.queue(params, caller)
        names = list_param(params, "AttributeNames")
        info = self.client.queue_info(name, fresh=True)
        stats = self.client.queue(name).stats() if sqs_attributes.needs_stats(names) else None
        attributes = sqs_attributes.render(info, stats, names, self.ns)
        return {"Attributes": attributes} if attributes else {}

    def set_queue_attributes(self, params: Params, caller: Caller) -> Result:
        name = self.reach.queue(params, caller)
        info = self.client.queue_info(name, fresh=True)
        changes = sqs_attributes.attribute_changes(
            require(params, "Attributes"),
            name=name,
            current=info.attributes,
            ns=self.ns,
            lookup=self.client.queue_info,
        )
        changes.pop("fifo", None)
        if changes:
            self.client.set_attributes(name, **changes)
        return {}

    def purge_queue(self, params: Params, caller: Caller) -> Result:
        self.client.queue(self.reach.queue(params, caller)).purge()
        return {}

    def tag_queue(self, params: Params, caller: Caller) -> Result:
        name = self.reach.queue(params, caller)
        given = params.get("Tags")
        if not given:
            raise MissingParameter("The request must contain the parameter Tags.")
        tags = dict(self.client.queue_info(name, fresh=True).attributes.tags)
        tags.update(sqs_attributes.tags(given))
        if len(tags) > 50:
            raise InvalidInput(f"Too many tags added for queue {self.ns.split(name)[2]}.")
        self.client.set_attributes(name, tags=tags)
        return {}

    def untag_queue(self, params: Params, caller: Caller) -> Result:
        name = self.reach.queue(params, caller)
        keys = list_param(params, "TagKeys")
        if not keys:
            raise InvalidInput("Tag keys must be between 1 and 128 characters in length.")
        tags = dict(self.client.queue_info(name, fresh=True).attributes.tags)
        for key in keys:
            tags.pop(key, None)
        self.client.set_attributes(name, tags=tags)
        return {}

    def list_queue_tags(self, params: Params, caller: Caller) -> Result:
        tags = dict(
            self.client.queue_info(self.reach.queue(params, caller), fresh=True).attributes.tags
        )
        return {"Tags": tags} if tags else {}

    def list_dead_letter_source_queues(self, params: Params, caller: Caller) -> Result:
        name = self.reach.queue(params, caller)
        self.client.queue_info(name, fresh=True)
        limit = int_param(params, "MaxResults", 1, 1000)
        candidates = [
            other
            for other in self.client.list_queues(self.ns.prefix(caller))
            if self.ns.in_namespace(other, caller)
        ]
        sources = sqs_attributes.dead_letter_sources(self.client, name, candidates)
        return self._page(sources, params, limit, "queueUrls", caller)

    def add_permission(self, params: Params, caller: Caller) -> Result:
        name = self.reach.queue(params, caller)
        label = require(params, "Label")
        accounts = list_param(params, "AWSAccountIds")
        actions = list_param(params, "Actions")
        if not actions:
            raise MissingParameter("The request must contain the parameter Actions.")
        if not accounts:
            raise InvalidInput(
                "Value [] for parameter PrincipalId is invalid. Reason: Unable to verify."
            )
        for action in actions:
            if action not in DELEGABLE:
                raise InvalidInput(
                    f"Value SQS:{action} for parameter ActionName is invalid. Reason: Only the"
                    " queue owner is allowed to invoke this action."
                )
        if len(actions) > 7:
            raise OverLimit(f"{len(actions)} Actions were found, maximum allowed is 7.")
        info = self.client.queue_info(name, fresh=True)
        policy = sqs_attributes.policy(info.attributes.settings.get("Policy"), self.ns.arn(name))
        if any(s.get("Sid") == label for s in policy["Statement"]):
            raise InvalidInput(
                f"Value {label} for parameter Label is invalid. Reason: Already exists."
            )
        policy["Statement"].append(
            {
                "Sid": label,
                "Effect": "Allow",
                "Principal": {"AWS": _one_or_list([f"arn:aws:iam::{a}:root" for a in accounts])},
                "Action": _one_or_list([f"SQS:{a}" for a in actions]),
                "Resource": self.ns.arn(name),
            }
        )
        self._set_policy(name, info.attributes, policy)
        return {}

    def remove_permission(self, params: Params, caller: Caller) -> Result:
        name = self.reach.queue(params, caller)
        label = require(params, "Label")
        info = self.client.queue_info(name, fresh=True)
        policy = sqs_attributes.policy(info.attributes.settings.get("Policy"), self.ns.arn(name))
        kept = [s for s in policy["Statement"] if s.get("Sid") != label]
        if len(kept) == len(policy["Statement"]):
            raise InvalidInput(
                f"Value {label} for parameter Label is invalid. Reason: can't find label."
            )
        policy["Statement"] = kept
        self._set_policy(name, info.attributes, policy if kept else None)
        return {}

    def _set_policy(self, name: str, attrs: QueueAttributes, policy: dict[str, Any] | None) -> None:
        settings = dict(attrs.settings)
        if policy is None:
            settings.pop("Policy", None)
        else:
            settings["Policy"] = json.dumps(policy, separators=(",", ":"))
        self.client.set_attributes(name, settings=settings)
