"""The SQS API's message actions: send (one, a batch, bare bodies), receive (long polls wait
in the event loop, `AsyncQueue.receive`), delete and change visibility, with SQS's rules for
earlier receipts, FIFO receive attempts and the 12-hour visibility limit."""

from __future__ import annotations

import dataclasses
import time
from collections import OrderedDict
from collections.abc import Callable

from ...aio import AsyncClient
from ...client import Client
from ...exceptions import (
    BatchRequestTooLong,
    ConveyorError,
    InvalidInput,
    InvalidMessageContents,
    MalformedReceipt,
    MessageNotFound,
    MessageTooLong,
    MissingParameter,
    QueueDoesNotExist,
    ReceiptHandleInvalid,
)
from ...models import Capability, Message, TypedValue
from ...queues import Queue
from ...receipts import parse_receipt, seconds_since_claim
from ...sends import MAX_BATCH_BYTES, SendEntry
from ...validation import MAX_VISIBILITY
from ..metrics import Metrics
from .message_attributes import (
    TRACE_TYPE,
    parse_message_attributes,
    parse_system_attributes,
    raw_value,
    render_attribute,
)
from .message_attributes import wanted as wanted_attribute
from .names import Caller
from .params import (
    TRACE_PARAM,
    Params,
    Result,
    batch_entries,
    batch_outcome,
    check_batch_ids,
    check_fifo,
    check_ordering_ids,
    entry_failure,
    entry_size,
    expired_receipt,
    gone_receipt,
    int_param,
    list_param,
    plain_bodies,
    receipt_words,
    require,
    too_long,
)
from .reach import Reach
from .wire import md5_hex, md5_hexes, md5_of_attributes, xml_unsafe

SYSTEM_ATTRIBUTES = (
    "SenderId",
    "SentTimestamp",
    "ApproximateReceiveCount",
    "ApproximateFirstReceiveTimestamp",
    "SequenceNumber",
    "MessageDeduplicationId",
    "MessageGroupId",
    "AWSTraceHeader",
    "DeadLetterQueueSourceArn",
)
ATTEMPT_WINDOW = 300.0
MAX_ATTEMPTS_KEPT = 10000


def _millis(seconds: float) -> str:
    return str(int(seconds * 1000))


class MessageActions:
    """The message actions, each answering one request: the sends, deletes and visibility
    changes called in the thread pool (or inline, `offload_write`), receives on the loop."""

    def __init__(
        self,
        client: Client,
        aio: AsyncClient,
        reach: Reach,
        metrics: Metrics,
        draining: Callable[[], bool],
    ) -> None:
        self.client = client
        self.aio = aio
        self.ns = reach.ns
        self.reach = reach
        self.metrics = metrics
        self.draining = draining
        self._attempts: OrderedDict[tuple[str, str], tuple[float, Result]] = OrderedDict()

    # -- send ------------------------------------------------------------------------

    def _entry(self, params: Params, entry_id: str) -> tuple[SendEntry, Result]:
        body = require(params, "MessageBody")
        if not isinstance(body, str):
            raise InvalidInput("MessageBody must be a string")
        data = body.encode("utf-8", "surrogatepass")  # (a lone surrogate is refused below)
        bad = xml_unsafe(body, data)
        if bad is not None:
            raise InvalidMessageContents(
                f"Invalid binary character '#x{ord(bad):X}' was found in the message"
                " body, the set of allowed characters is #x9 | #xA | #xD | #x20 to #xD7FF |"
                " #xE000 to #xFFFD | #x10000 to #x10FFFF"
            )
        attributes, digest = parse_message_attributes(params.get("MessageAttributes") or {})
        extra: Result = {"MD5OfMessageBody": md5_hex(data)}
        if attributes:
            extra["MD5OfMessageAttributes"] = digest
        system = params.get("MessageSystemAttributes") or {}
        if system:
            trace, system_digest = parse_system_attributes(system)
            attributes["AWSTraceHeader"] = TypedValue(TRACE_TYPE, trace)
            extra["MD5OfMessageSystemAttributes"] = system_digest
        elif isinstance(header := params.get(TRACE_PARAM), str):
            attributes["AWSTraceHeader"] = TypedValue(TRACE_TYPE, header)
        check_ordering_ids(params)
        delay = int_param(params, "DelaySeconds", 0, 900)
        entry = SendEntry(
            entry_id=entry_id,
            body=body,
            delay=float(delay) if delay is not None else None,
            group_id=params.get("MessageGroupId"),
            dedup_id=params.get("MessageDeduplicationId"),
            attributes=attributes,
        )
        return entry, extra

    def send_message(self, params: Params, caller: Caller) -> Result:
        name = self.reach.queue(params, caller)
        queue = self.client.queue(name)
        attrs = queue.info.attributes
        if attrs.fifo:
            check_fifo([params], attrs.content_based_dedup)
        entry, out = self._entry(params, "0")
        try:
            sent = queue.send(
                entry.body,
                delay=entry.delay,
                group_id=entry.group_id,
                dedup_id=entry.dedup_id,
                attributes=entry.attributes,
            )
        except MessageTooLong:
            raise too_long(attrs.max_message_bytes) from None
        self.metrics.sent(name, 1)
        out["MessageId"] = sent.id
        if sent.sequence is not None and attrs.fifo:
            out["SequenceNumber"] = str(sent.sequence)
        return out

    def send_message_batch(self, params: Params, caller: Caller) -> Result:
        name = self.reach.queue(params, caller)
        raw = batch_entries(params, "SendMessageBatch")
        entries: list[SendEntry] = []
        extras: dict[str, Result] = {}
        failed: list[Result] = []
        ids = [str(e.get("Id", "")) for e in raw]
        check_batch_ids(ids)
        bodies = plain_bodies(raw)
        total = sum(map(len, bodies)) if bodies is not None else sum(map(entry_size, raw))
        if total > MAX_BATCH_BYTES:
            raise BatchRequestTooLong(
                f"Batch requests cannot be longer than {MAX_BATCH_BYTES} bytes."
                f" You have sent {total} bytes."
            )
        queue = self.client.queue(name)
        attrs = queue.info.attributes
        if attrs.fifo:
            check_fifo(raw, attrs.content_based_dedup, batch=True)
        trace = params.get(TRACE_PARAM)
        if trace is None and not attrs.fifo and bodies is not None:
            return self._send_plain(name, queue, attrs.max_message_bytes, ids, bodies)
        for entry_id, e in zip(ids, raw, strict=True):
            try:
                entry, extra = self._entry(
                    e if trace is None else {**e, TRACE_PARAM: trace}, entry_id
                )
            except ConveyorError as exc:
                failed.append(entry_failure(entry_id, exc))
                continue
            entries.append(entry)
            extras[entry_id] = extra
        successful: list[Result] = []
        if entries:
            fifo, limit = attrs.fifo, attrs.max_message_bytes
            for r in queue.send_batch(entries):
                if r.error is not None:
                    error = too_long(limit) if isinstance(r.error, MessageTooLong) else r.error
                    failed.append(entry_failure(r.entry_id, error))
                    continue
                item: Result = {"Id": r.entry_id, "MessageId": r.result.id, **extras[r.entry_id]}
                if fifo and r.result.sequence is not None:
                    item["SequenceNumber"] = str(r.result.sequence)
                successful.append(item)
            self.metrics.sent(name, len(successful))
        return batch_outcome(successful, failed)

    def _send_plain(
        self, name: str, queue: Queue, limit: int, ids: list[str], bodies: list[bytes]
    ) -> Result:
        """SendMessageBatch of entries that are an id and a body each (the common batch):
        the bodies go to the store as they are, without an entry object each."""
        try:  # no result object an entry where none is refused
            sent = queue.run_send(queue.sending(bodies))
        except MessageTooLong:  # refused before anything was sent: answered entry by entry
            pass
        else:
            self.metrics.sent(name, len(sent))
            return {
                "Successful": [
                    {"Id": i, "MessageId": m, "MD5OfMessageBody": d}
                    for i, m, d in zip(ids, sent.ids, md5_hexes(bodies), strict=True)
                ]
            }
        successful: list[Result] = []
        failed: list[Result] = []
        for r in queue.send_batch(bodies):
            i = int(r.entry_id)
            if r.error is not None:
                error = too_long(limit) if isinstance(r.error, MessageTooLong) else r.error
                failed.append(entry_failure(ids[i], error))
                continue
            successful.append(
                {
                    "Id": ids[i],
                    "MessageId": r.result.id,
                    "MD5OfMessageBody": md5_hex(bodies[i]),
                }
            )
        self.metrics.sent(name, len(successful))
        return batch_outcome(successful, failed)

    # -- receive ---------------------------------------------------------------------

    async def receive_message(self, params: Params, caller: Caller) -> Result:
        name = self.reach.queue(params, caller)
        count = int_param(params, "MaxNumberOfMessages", 1, 10, 1) or 1
        visibility = int_param(params, "VisibilityTimeout", 0, 43200)
        wait = int_param(params, "WaitTimeSeconds", 0, 20)
        system = set(list_param(params, "AttributeNames")) | set(
            list_param(params, "MessageSystemAttributeNames")
        )
        wanted = list_param(params, "MessageAttributeNames")
        attempt = params.get("ReceiveRequestAttemptId")
        if attempt is not None:
            key = (name, str(attempt))
            cached = self._attempts.get(key)
            if cached is not None and cached[0] > time.monotonic():
                return cached[1]
        queue = self.aio.queue(name)
        gone = caller.gone
        messages = await queue.receive(
            count,
            visibility_timeout=None if visibility is None else float(visibility),
            wait=None if wait is None else float(wait),
            # a long poll whose client went away claims nothing after its wait
            stop=lambda: self.draining() or gone(),
        )
        self.metrics.received(name, len(messages), count)
        result: Result = {}
        if messages:
            fifo = bool(system) and self.client.queue(name).info.attributes.fifo
            result["Messages"] = [self._render(m, system, wanted, caller, fifo) for m in messages]
        if attempt is not None and messages:
            self._remember_attempt((name, str(attempt)), result)
        return result

    def _remember_attempt(self, key: tuple[str, str], result: Result) -> None:
        self._attempts[key] = (time.monotonic() + ATTEMPT_WINDOW, result)
        while len(self._attempts) > MAX_ATTEMPTS_KEPT:
            self._attempts.popitem(last=False)

    def _receives_before(self, m: Message) -> int:
        """SQS counts receives "across all queues": a message its source queue's redrive
        policy moved here was received maxReceiveCount times there (the store counts afresh
        in the dead-letter queue). Messages moved by hand (they carry an error) or whose
        source no longer names this queue count from here."""
        if m.source_queue is None or m.error is not None:
            return 0
        try:
            policy = self.client.queue_info(m.source_queue).attributes.dead_letter
        except QueueDoesNotExist:
            return 0
        return 0 if policy is None else policy.receives_before_move(m.queue)

    def _render(
        self, m: Message, system: set[str], wanted: list[str], caller: Caller, fifo: bool
    ) -> Result:
        try:
            body, digest = m.body.decode(), md5_hex(m.body)
        except UnicodeDecodeError:  # bytes sent through the SDK: what the client is given
            body = m.body.decode("utf-8", errors="replace")
            digest = md5_hex(body.encode())
        out: Result = {
            "MessageId": m.id,
            "ReceiptHandle": m.receipt,
            "MD5OfBody": digest,
            "Body": body,
        }
        trace = m.attributes.get("AWSTraceHeader")
        is_trace = isinstance(trace, TypedValue) and trace.data_type == TRACE_TYPE
        if system:
            every = "All" in system
            values: dict[str, str] = {
                "SenderId": caller.account,
                "SentTimestamp": _millis(m.sent_at),
                "ApproximateReceiveCount": str(m.receive_count + self._receives_before(m)),
                "ApproximateFirstReceiveTimestamp": _millis(m.first_received_at or m.sent_at),
            }
            if m.group_id is not None:
                values["MessageGroupId"] = m.group_id  # a fair queue's too
                if fifo:
                    values["SequenceNumber"] = str(m.sequence)
            if m.dedup_id is not None:
                values["MessageDeduplicationId"] = m.dedup_id
            if is_trace and isinstance(trace, TypedValue):
                values["AWSTraceHeader"] = str(trace.value)
            if m.source_queue is not None:
                values["DeadLetterQueueSourceArn"] = self.ns.arn(m.source_queue)
            attrs = {k: v for k, v in values.items() if every or k in system}
            if attrs:
                out["Attributes"] = attrs
        if wanted:
            selected = {
                k: v
                for k, v in m.attributes.items()
                if not (is_trace and k == "AWSTraceHeader") and wanted_attribute(k, wanted)
            }
            if selected:
                rendered = {k: render_attribute(v) for k, v in selected.items()}
                out["MD5OfMessageAttributes"] = md5_of_attributes(
                    (k, v["DataType"], raw_value(selected[k])) for k, v in rendered.items()
                )
                out["MessageAttributes"] = rendered
        return out

    # -- delete and visibility -------------------------------------------------------

    def delete_message(self, params: Params, caller: Caller) -> Result:
        name = self.reach.queue(params, caller)
        receipt = str(require(params, "ReceiptHandle"))
        with receipt_words(receipt):
            for refused in self._check_fifo_receipts(name, [receipt]).values():
                raise refused
            try:
                self.client.queue(name).delete(receipt)
            except ReceiptHandleInvalid as exc:
                error = self._earlier_receipt(name, receipt, exc)
                if error is not None:
                    raise error from None
        self.metrics.deleted(name, 1)
        return {}

    def _beyond_total(self, receipt: str, timeout: int) -> InvalidInput | None:
        """SQS keeps a message out of sight at most 12 hours from its receive, however often
        its visibility is extended: a timeout that would end later is refused."""
        if timeout <= 0:
            return None
        elapsed = seconds_since_claim(receipt, self.client.clock.now())
        if elapsed is None or elapsed + timeout <= MAX_VISIBILITY:
            return None
        return InvalidInput(
            f"Value {timeout} for parameter VisibilityTimeout is invalid. Reason: Total"
            f" VisibilityTimeout for the message is beyond the limit [{MAX_VISIBILITY:.0f}"
            " seconds]"
        )

    def _check_fifo_receipts(self, name: str, receipts: list[str]) -> dict[str, Exception]:
        """On a FIFO queue a receipt expires with its visibility timeout, as on SQS: a
        receipt whose message is visible again is refused before anything is changed. The
        refused receipts and their errors."""
        queue = self.client.queue(name)
        if (
            not queue.info.attributes.fifo
            or Capability.EDIT_IN_PLACE not in self.client.capabilities
        ):
            return {}
        now = self.client.clock.now()
        refused: dict[str, Exception] = {}
        for receipt in receipts:
            try:
                _, message_id, _ = parse_receipt(name, receipt)
                message = queue.get(message_id)
            except (ReceiptHandleInvalid, MessageNotFound):
                continue  # malformed (the store says so) or gone (a delete succeeds)
            if message.visible_at <= now:
                refused[receipt] = expired_receipt(receipt)
        return refused

    def _earlier_receipt(
        self, name: str, receipt: str, error: Exception, visibility: float | None = None
    ) -> Exception | None:
        """SQS takes an earlier receipt of a message on a standard queue: a delete removes
        the message (or succeeds when it is gone already), a visibility change applies to it
        while it exists. The SDK keeps its stricter rule (a receipt holds until the message is
        received again); this maps it, on stores that edit in place. FIFO queues refuse a
        receipt that is no longer the message's, as SQS does ("expired"). None: done."""
        if not isinstance(error, ReceiptHandleInvalid) or isinstance(error, MalformedReceipt):
            return error
        try:
            _, message_id, _ = parse_receipt(name, receipt)
        except ReceiptHandleInvalid:
            return error  # another queue's receipt
        queue = self.client.queue(name)
        if Capability.EDIT_IN_PLACE not in self.client.capabilities:
            return error
        if queue.info.attributes.fifo:
            try:
                queue.get(message_id)
            except MessageNotFound:  # deleted already: a delete succeeds
                return None if visibility is None else gone_receipt(receipt)
            return expired_receipt(receipt)
        try:
            if visibility is None:
                queue.remove(message_id)
            else:
                queue.update(message_id, visible_at=self.client.clock.now() + visibility)
        except MessageNotFound:
            if visibility is not None:
                return gone_receipt(receipt)
        return None

    def delete_message_batch(self, params: Params, caller: Caller) -> Result:
        name = self.reach.queue(params, caller)
        raw = batch_entries(params, "DeleteMessageBatch")
        ids = [str(e.get("Id", "")) for e in raw]
        check_batch_ids(ids)
        receipts = {i: str(e.get("ReceiptHandle") or "") for i, e in zip(ids, raw, strict=True)}
        refused = self._check_fifo_receipts(name, list(receipts.values()))
        failed = [entry_failure(i, refused[r]) for i, r in receipts.items() if r in refused]
        receipts = {i: r for i, r in receipts.items() if r not in refused}
        results = [
            r if r.error is None else dataclasses.replace(
                r, error=self._earlier_receipt(name, receipts[r.entry_id], r.error))
            for r in (self.client.queue(name).delete_batch(receipts) if receipts else [])
        ]  # fmt: skip
        ok = [{"Id": r.entry_id} for r in results if r.error is None]
        self.metrics.deleted(name, len(ok))
        failed += [
            entry_failure(r.entry_id, r.error, receipts[r.entry_id])
            for r in results
            if r.error is not None
        ]
        return batch_outcome(ok, failed)

    def change_message_visibility(self, params: Params, caller: Caller) -> Result:
        name = self.reach.queue(params, caller)
        receipt = str(require(params, "ReceiptHandle"))
        if params.get("VisibilityTimeout") in (None, ""):
            raise MissingParameter("The request must contain the parameter VisibilityTimeout.")
        timeout = int_param(params, "VisibilityTimeout", 0, 43200) or 0
        beyond = self._beyond_total(receipt, timeout)
        if beyond is not None:
            raise beyond
        with receipt_words():
            for refused in self._check_fifo_receipts(name, [receipt]).values():
                raise refused
            try:
                self.client.queue(name).change_visibility(receipt, float(timeout))
            except ReceiptHandleInvalid as exc:
                error = self._earlier_receipt(name, receipt, exc, float(timeout))
                if error is not None:
                    raise error from None
        return {}

    def change_message_visibility_batch(self, params: Params, caller: Caller) -> Result:
        name = self.reach.queue(params, caller)
        raw = batch_entries(params, "ChangeMessageVisibilityBatch")
        ids = [str(e.get("Id", "")) for e in raw]
        check_batch_ids(ids)
        entries: dict[str, tuple[str, float]] = {}
        failed: list[Result] = []
        for entry_id, e in zip(ids, raw, strict=True):
            try:
                timeout = int_param(e, "VisibilityTimeout", 0, 43200, 0) or 0
            except ConveyorError as exc:
                failed.append(entry_failure(entry_id, exc))
                continue
            receipt = str(e.get("ReceiptHandle") or "")
            beyond = self._beyond_total(receipt, timeout)
            if beyond is not None:
                failed.append(entry_failure(entry_id, beyond))
                continue
            entries[entry_id] = (receipt, float(timeout))
        refused = self._check_fifo_receipts(name, [r for r, _ in entries.values()])
        failed += [entry_failure(i, refused[r]) for i, (r, _) in entries.items() if r in refused]
        entries = {i: e for i, e in entries.items() if e[0] not in refused}
        results = [
            r if r.error is None else dataclasses.replace(r, error=self._earlier_receipt(
                name, entries[r.entry_id][0], r.error, entries[r.entry_id][1]))
            for r in (self.client.queue(name).change_visibility_batch(entries) if entries else [])
        ]  # fmt: skip
        ok = [{"Id": r.entry_id} for r in results if r.error is None]
        failed += [
            entry_failure(r.entry_id, r.error, entries[r.entry_id][0])
            for r in results
            if r.error is not None
        ]
        return batch_outcome(ok, failed)
