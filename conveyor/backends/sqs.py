"""`sqs://?region=...&endpoint_url=...`: an adapter to any SQS endpoint (AWS, or `conveyor serve`).

The SQS API has no inspection or editing, topics, consumers, priorities, archive, rate limits
or at-most-once delivery, so this store implements the core contract alone, with the FIFO
feature; message ids are SQS's.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from ..clock import SYSTEM_CLOCK, Clock
from ..exceptions import (
    ConveyorError,
    InvalidAttribute,
    InvalidInput,
    InvalidMessageContents,
    MessageNotInflight,
    QueueDoesNotExist,
    QueueExists,
    ReceiptHandleInvalid,
    StoreUnavailable,
)
from ..models import (
    Capability,
    DeadLetterPolicy,
    Message,
    NewMessage,
    QueueAttributes,
    QueueInfo,
    QueueStats,
    SendResult,
    TypedValue,
    message_from,
)
from .base import Backend

T = TypeVar("T")

ERRORS: dict[str, type[ConveyorError]] = {
    "AWS.SimpleQueueService.NonExistentQueue": QueueDoesNotExist,
    "QueueDoesNotExist": QueueDoesNotExist,
    "QueueAlreadyExists": QueueExists,
    "QueueNameExists": QueueExists,
    "ReceiptHandleIsInvalid": ReceiptHandleInvalid,
    "AWS.SimpleQueueService.MessageNotInflight": MessageNotInflight,
    "MessageNotInflight": MessageNotInflight,
    "InvalidAttributeValue": InvalidAttribute,
    "InvalidMessageContents": InvalidMessageContents,
}


def translate(code: str, message: str, status: int) -> ConveyorError:
    cls = ERRORS.get(code)
    if cls is not None:
        return cls(message)
    if status >= 500 or code in ("ServiceUnavailable", "RequestThrottled", "ThrottlingException"):
        return StoreUnavailable(f"SQS: {code}: {message}")
    return InvalidInput(f"SQS: {code}: {message}")


class SQSBackend(Backend):
    scheme = "sqs"
    features = frozenset({Capability.CROSS_PROCESS, Capability.FIFO})
    batch_limit = 10  # SQS's batch requests and receives

    def __init__(
        self, *, region: str, endpoint_url: str | None = None, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        super().__init__(clock=clock)
        self.region = region
        self.endpoint_url = endpoint_url
        self._client: Any = None
        self._lock = threading.Lock()
        self._urls: dict[str, str] = {}

    @property
    def _sqs(self) -> Any:
        """The boto3 client, made on first use."""
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = boto3.client(
                        "sqs",
                        region_name=self.region,
                        endpoint_url=self.endpoint_url,
                        config=Config(retries={"mode": "standard"}, max_pool_connections=32),
                    )
        return self._client

    @classmethod
    def from_url(cls, rest: str, params: dict[str, str], *, clock: Clock) -> SQSBackend:
        region = params.get("region") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        return cls(region=region, endpoint_url=params.get("endpoint_url"), clock=clock)

    @property
    def key(self) -> str:
        return f"sqs:{self.endpoint_url or 'aws'}:{self.region}"

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    # -- calls ----------------------------------------------------------------------------

    def _call(self, fn: Callable[..., T], **kwargs: Any) -> T:
        try:
            return fn(**kwargs)
        except ClientError as exc:
            err = exc.response.get("Error", {})
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 400)
            raise translate(str(err.get("Code")), str(err.get("Message")), status) from exc
        except BotoCoreError as exc:
            raise StoreUnavailable(f"SQS endpoint unreachable: {exc}") from exc

    def _url(self, name: str) -> str:
        url = self._urls.get(name)
        if url is None:
            url = self._call(self._sqs.get_queue_url, QueueName=name)["QueueUrl"]
            self._urls[name] = url
        return url

    def _arn(self, name: str) -> str:
        attrs = self._call(
            self._sqs.get_queue_attributes, QueueUrl=self._url(name), AttributeNames=["QueueArn"]
        )
        return str(attrs["Attributes"]["QueueArn"])

    # -- queues ---------------------------------------------------------------------------

    def _to_sqs(self, a: QueueAttributes, *, creating: bool) -> dict[str, str]:
        out = {
            "VisibilityTimeout": str(round(a.visibility_timeout)),
            "DelaySeconds": str(round(a.delay)),
            "MessageRetentionPeriod": str(round(a.retention)),
            "MaximumMessageSize": str(a.max_message_bytes),
            "ReceiveMessageWaitTimeSeconds": str(round(a.receive_wait)),
            **a.settings,
        }
        if a.dead_letter is not None:
            out["RedrivePolicy"] = json.dumps(
                {
                    "deadLetterTargetArn": self._arn(a.dead_letter.queue),
                    "maxReceiveCount": a.dead_letter.max_receive_count,
                }
            )
        elif not creating:
            out["RedrivePolicy"] = ""
        if a.fifo:
            if creating:
                out["FifoQueue"] = "true"
            out["ContentBasedDeduplication"] = "true" if a.content_based_dedup else "false"
            out["DeduplicationScope"] = "messageGroup" if a.dedup_per_group else "queue"
        return out

    def create_queue(self, name: str, attributes: QueueAttributes) -> tuple[QueueInfo, bool]:
        try:
            info = self.get_queue(name)
        except QueueDoesNotExist:
            pass
        else:
            if info.attributes != attributes:
                raise QueueExists(
                    f"queue {name!r} exists with different attributes: use set_attributes"
                )
            return info, False
        kwargs: dict[str, Any] = {
            "QueueName": name,
            "Attributes": self._to_sqs(attributes, creating=True),
        }
        if attributes.tags:
            kwargs["tags"] = dict(attributes.tags)
        self._urls[name] = self._call(self._sqs.create_queue, **kwargs)["QueueUrl"]
        return self.get_queue(name), True

    def delete_queue(self, name: str) -> None:
        self._call(self._sqs.delete_queue, QueueUrl=self._url(name))
        self._urls.pop(name, None)

    def list_queues(self, prefix: str = "") -> list[str]:
        names: list[str] = []
        kwargs: dict[str, Any] = {"MaxResults": 1000}
        if prefix:
            kwargs["QueueNamePrefix"] = prefix
        while True:
            page = self._call(self._sqs.list_queues, **kwargs)
            names += [u.rsplit("/", 1)[1] for u in page.get("QueueUrls", [])]
            if not page.get("NextToken"):
                return sorted(names)
            kwargs["NextToken"] = page["NextToken"]

    def _attributes(self, name: str) -> dict[str, str]:
        got = self._call(
            self._sqs.get_queue_attributes, QueueUrl=self._url(name), AttributeNames=["All"]
        )
        return dict(got.get("Attributes", {}))

    def _tags(self, name: str) -> dict[str, str]:
        return dict(self._call(self._sqs.list_queue_tags, QueueUrl=self._url(name)).get("Tags", {}))

    def get_queue(self, name: str) -> QueueInfo:
        a = self._attributes(name)  # QueueDoesNotExist if there is no such queue
        tags = self._tags(name)
        dead_letter = None
        if a.get("RedrivePolicy"):
            policy = json.loads(a["RedrivePolicy"])
            dead_letter = DeadLetterPolicy(
                queue=str(policy["deadLetterTargetArn"]).rsplit(":", 1)[1],
                max_receive_count=int(policy["maxReceiveCount"]),
            )
        known = {"Policy", "RedriveAllowPolicy", "KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds"}
        attributes = QueueAttributes(
            visibility_timeout=float(a["VisibilityTimeout"]),
            delay=float(a["DelaySeconds"]),
            retention=float(a["MessageRetentionPeriod"]),
            max_message_bytes=int(a["MaximumMessageSize"]),
            receive_wait=float(a["ReceiveMessageWaitTimeSeconds"]),
            dead_letter=dead_letter,
            fifo=a.get("FifoQueue") == "true",
            content_based_dedup=a.get("ContentBasedDeduplication") == "true",
            dedup_per_group=a.get("DeduplicationScope") == "messageGroup",
            tags=tags,
            settings={k: v for k, v in a.items() if k in known},
        )
        return QueueInfo(
            name=name,
            attributes=attributes,
            created_at=float(a.get("CreatedTimestamp", 0)),
            updated_at=float(a.get("LastModifiedTimestamp", 0)),
        )

    def set_queue_attributes(self, name: str, attributes: QueueAttributes) -> QueueInfo:
        url = self._url(name)
        self._call(
            self._sqs.set_queue_attributes,
            QueueUrl=url,
            Attributes=self._to_sqs(attributes, creating=False),
        )
        current = self._tags(name)
        if dict(current) != dict(attributes.tags):
            if set(current) - set(attributes.tags):
                self._call(
                    self._sqs.untag_queue,
                    QueueUrl=url,
                    TagKeys=list(set(current) - set(attributes.tags)),
                )
            if attributes.tags:
                self._call(self._sqs.tag_queue, QueueUrl=url, Tags=dict(attributes.tags))
        return self.get_queue(name)

    def purge_queue(self, name: str) -> int:
        stats = self.queue_stats(name)
        self._call(self._sqs.purge_queue, QueueUrl=self._url(name))
        return stats.total

    def queue_stats(self, name: str) -> QueueStats:
        a = self._attributes(name)
        return QueueStats(
            queue=name,
            ready=int(a.get("ApproximateNumberOfMessages", 0)),
            in_flight=int(a.get("ApproximateNumberOfMessagesNotVisible", 0)),
            delayed=int(a.get("ApproximateNumberOfMessagesDelayed", 0)),
        )

    # -- messages -------------------------------------------------------------------------

    def send(self, queue: str, messages: Sequence[NewMessage]) -> list[SendResult]:
        url = self._url(queue)
        entries = []
        for i, m in enumerate(messages):
            try:
                body = m.body.decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidMessageContents("SQS message bodies must be UTF-8 text") from None
            entry: dict[str, Any] = {"Id": str(i), "MessageBody": body}
            if m.group_id is not None:
                entry["MessageGroupId"] = m.group_id
            else:
                entry["DelaySeconds"] = round(m.delay)
            if m.dedup_id is not None:
                entry["MessageDeduplicationId"] = m.dedup_id
            if m.attributes:
                entry["MessageAttributes"] = {
                    k: _attribute_to_sqs(v) for k, v in m.attributes.items()
                }
            entries.append(entry)
        results: list[SendResult] = []
        for start in range(0, len(entries), 10):
            got = self._call(
                self._sqs.send_message_batch, QueueUrl=url, Entries=entries[start : start + 10]
            )
            for failed in got.get("Failed", []):
                raise translate(failed["Code"], failed.get("Message", ""), 400)
            by_id = {e["Id"]: e for e in got.get("Successful", [])}
            for e in entries[start : start + 10]:
                ok = by_id[e["Id"]]
                seq = ok.get("SequenceNumber")
                results.append(SendResult(id=ok["MessageId"], sequence=int(seq) if seq else None))
        return results

    def receive(self, queue: str, max_messages: int, visibility_timeout: float) -> list[Message]:
        got = self._call(
            self._sqs.receive_message,
            QueueUrl=self._url(queue),
            MaxNumberOfMessages=max_messages,
            VisibilityTimeout=round(visibility_timeout),
            WaitTimeSeconds=0,
            MessageSystemAttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        now = self.clock.now()
        out = []
        before: dict[str, int] = {}
        for m in got.get("Messages", []):
            a = m.get("Attributes", {})
            first = a.get("ApproximateFirstReceiveTimestamp")
            source = _source(a.get("DeadLetterQueueSourceArn"))
            count = int(a.get("ApproximateReceiveCount", 1))
            if source is not None:
                if source not in before:
                    before[source] = self._receives_in_source(source, queue)
                count = max(1, count - before[source])
            out.append(
                message_from(
                    {
                        "id": m["MessageId"],
                        "queue": queue,
                        "body": m["Body"].encode("utf-8"),
                        "attributes": {
                            k: _attribute_from_sqs(v)
                            for k, v in m.get("MessageAttributes", {}).items()
                        },
                        "group_id": a.get("MessageGroupId"),
                        "dedup_id": a.get("MessageDeduplicationId"),
                        "priority": 0,
                        "deadline": None,
                        "sent_at": int(a.get("SentTimestamp", 0)) / 1000,
                        "visible_at": now + visibility_timeout,
                        "receive_count": count,
                        "first_received_at": int(first) / 1000 if first else None,
                        "version": 1,
                        "sequence": int(a.get("SequenceNumber", 0)),
                        "source_queue": source,
                        "error": None,
                        "compressed": False,
                        "receipt": m["ReceiptHandle"],
                    }
                )
            )
        return out

    def _receives_in_source(self, source: str, dead_letter_queue: str) -> int:
        """SQS counts receives across queues; the SDK counts afresh in a dead-letter queue:
        what a message moved here by `source`'s redrive policy had there."""
        try:
            policy = self.get_queue(source).attributes.dead_letter
        except QueueDoesNotExist:
            return 0
        return 0 if policy is None else policy.receives_before_move(dead_letter_queue)

    def delete(self, queue: str, receipts: Sequence[str]) -> list[Exception | None]:
        entries = [{"Id": str(i), "ReceiptHandle": r} for i, r in enumerate(receipts)]
        got = self._call(self._sqs.delete_message_batch, QueueUrl=self._url(queue), Entries=entries)
        return _batch_errors(len(receipts), got)

    def change_visibility(
        self, queue: str, changes: Sequence[tuple[str, float]]
    ) -> list[Exception | None]:
        entries = [
            {"Id": str(i), "ReceiptHandle": r, "VisibilityTimeout": round(t)}
            for i, (r, t) in enumerate(changes)
        ]
        got = self._call(
            self._sqs.change_message_visibility_batch, QueueUrl=self._url(queue), Entries=entries
        )
        return _batch_errors(len(changes), got)


def _source(arn: str | None) -> str | None:
    return arn.rsplit(":", 1)[1] if arn else None


def _batch_errors(n: int, got: dict[str, Any]) -> list[Exception | None]:
    errors: list[Exception | None] = [None] * n
    for failed in got.get("Failed", []):
        errors[int(failed["Id"])] = translate(failed["Code"], failed.get("Message", ""), 400)
    return errors


def _attribute_to_sqs(value: Any) -> dict[str, Any]:
    if isinstance(value, TypedValue):
        key = "BinaryValue" if isinstance(value.value, bytes) else "StringValue"
        return {"DataType": value.data_type, key: value.value}
    if isinstance(value, bytes):
        return {"DataType": "Binary", "BinaryValue": value}
    if isinstance(value, str):
        return {"DataType": "String", "StringValue": value}
    return {"DataType": "Number", "StringValue": str(value)}


def _attribute_from_sqs(spec: dict[str, Any]) -> Any:
    data_type = spec["DataType"]
    value = spec.get("BinaryValue", spec.get("StringValue"))
    if isinstance(value, str) and data_type.startswith("Binary"):
        value = base64.b64decode(value)
    if data_type in ("String", "Binary"):
        return value
    if data_type == "Number":
        text = str(value)
        try:
            return int(text)
        except ValueError:
            number = float(text)
            return number if repr(number) == text else TypedValue(data_type, text)
    return TypedValue(data_type, value if isinstance(value, bytes) else str(value))


from_url = SQSBackend.from_url
