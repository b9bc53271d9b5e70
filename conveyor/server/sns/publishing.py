"""SNS's Publish and PublishBatch: a publication routed through the subscriptions' filter
policies and delivered in one atomic fan-out (`Client.publish_copies`), each subscription's
copy as SNS would send it (the JSON envelope, the raw message, an outbox's text, what a
webhook's deliverer needs); a copy a queue refuses goes to the subscription's dead-letter
queue and the publish stands."""

from __future__ import annotations

import dataclasses
import json
import re
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from ...exceptions import ConveyorError, InvalidInput, NotFound, QueueDoesNotExist, SnsError
from ...models import AttributeValue, SendResult, TypedValue
from ...sends import SendEntry
from ..sqs.message_attributes import TRACE_TYPE
from ..sqs.names import Caller
from ..sqs.params import TRACE_PARAM
from .arns import TOPIC_ARN_RE, Arns
from .attributes import redrive_target
from .outbox import DIRECT_SMS, OUTBOX_PROTOCOLS, PHONE_RE, TEXT_PROTOCOLS, outbox_attributes
from .pending import PENDING
from .publication import (
    MAX_MESSAGE,
    Publication,
    copy_id,
    envelope,
    passes,
    read_publication,
    topic_sequence,
)
from .signing import Signer
from .subscriptions import delivery_info
from .webhooks import HTTP_PROTOCOLS
from .wire import Params, Result, invalid, numbered

MAX_BATCH = 10


class Publishing:
    """The publish actions, each answering one request."""

    def __init__(self, arns: Arns, signer: Signer, outbox: frozenset[str]) -> None:
        self.arns = arns
        self.client = arns.client
        self.ns = arns.ns
        self.signer = signer
        self.outbox = outbox  # the protocols kept in outboxes (sns_outbox)

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
        topic, settings = self.arns.existing(arn, caller, target)
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
        topic, settings = self.arns.existing(params.get("TopicArn"), caller)
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
        arn, text = self.arns.topic_arn(topic), p.body_for("sqs")
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
                sub = self.arns.subscription_arn(topic, queue)
                said = p.body_for(protocol) if protocol in OUTBOX_PROTOCOLS else text
                body = envelope(mid, arn, p, said, caller, topic, sub, now, sign, sequence)
                sent_attributes = traced
            if webhook:  # what its POST needs, in its delivery queue
                info = delivery_info(self.arns, topic, queue, attributes, settings)
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

    def _refused(self, copies: Mapping[str, SendEntry]) -> list[str]:
        """The queues that refuse their copies (or are gone)."""
        refused = []
        for queue, entry in copies.items():
            try:
                self.client.queue(queue).check(entry)
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
