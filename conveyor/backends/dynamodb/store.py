"""The DynamoDB store: one table, optimistic claims, transactions for what touches several
items.

A claim is a conditional update on the message's `version`: of two receivers, one wins and
the other moves on. Receives read a sparse index of ready messages only (`conveyor-ready`),
so their cost does not grow with the messages in flight; delayed and in-flight messages sit
in a second sparse index by the time they become visible (`conveyor-waiting`), from which a
receive first releases those that are due. Sends of several messages, deletes of several
receipts, fan-out, moves between queues and FIFO de-duplication are `TransactWriteItems`:
all or nothing. DynamoMQ's queues (`STANDARD`, `DLQ`) are read through DynamoMQ's own index,
as DynamoMQ does, because DynamoMQ's consumers, which may run beside, do not keep the sparse
indexes. Receives (claims.py), totals and stats (accounts.py), editing and topics are
parts the store holds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import secrets
from collections.abc import Iterator, Sequence
from typing import Any

from ...clock import Clock
from ...exceptions import ConveyorError, InvalidInput, StoreUnavailable
from ...ids import new_ids
from ...models import (
    Capability,
    DeadLetterPolicy,
    Message,
    NewMessage,
    QueueAttributes,
    QueueInfo,
    QueueStats,
    SendResult,
    sent_result,
)
from ...receipts import parse_receipt, stale_receipt
from ..base import Backend
from ..errors import (
    no_message,
    no_queue,
    queue_exists,
)
from ..exits import at_end
from .accounts import DynamoAccounts, last_totals
from .claims import DynamoClaims
from .editing import DynamoEditor
from .items import (
    COMPAT,
    COMPAT_MAX_RECEIVES,
    QUEUES,
    Doc,
    Entry,
    dedup_record_id,
    doc_item,
    doc_of,
    entry_of,
    n,
    new_doc,
    put_actions,
    queue_id,
    queue_info,
    rfc3339,
    s,
    text,
)
from .items import (
    Sequence as SendOrder,
)
from .registry import DynamoRegistry
from .table import (
    META_ID,
    SCHEMA_VERSION,
    Cancelled,
    ConditionFailed,
    Item,
    Table,
    expr,
)

QUEUE_CACHE_SECONDS = 1.0  # how long a queue's registry entry is trusted (store clock)
MAX_ACTIONS = 100  # TransactWriteItems' limit


class DynamoStore(Backend):
    """A queue store on one DynamoDB table. Build one with `from_url`."""

    scheme = "dynamodb"
    batch_limit = 50  # a send of 50 writes at most 100 items (with FIFO de-duplication
    # records) in one transaction, TransactWriteItems' limit
    features = frozenset(
        {
            Capability.PRIORITY,
            Capability.FIFO,
            Capability.AT_MOST_ONCE,
            Capability.CROSS_PROCESS,
            Capability.SENDER_IDS,
            Capability.DUPLICATE_REPORT,
            Capability.BINARY_BODIES,
            Capability.COMPRESSION,
            Capability.TOTALS,
            Capability.STRICT_RECEIPTS,
            Capability.GIVE_BACK,
        }
    )

    def __init__(self, table: Table, *, clock: Clock, poll_interval: float = 1.0) -> None:
        super().__init__(clock=clock)
        self.table = table
        self._poll_interval = poll_interval
        self.order = SendOrder()
        self._entries: dict[str, tuple[float, Entry]] = {}
        self._prepared = False
        self._schema_found = SCHEMA_VERSION  # the table's, once read (a new table: this one)
        self.accounts = DynamoAccounts(self)
        totals = self.accounts.totals  # written however the process ends
        at_end(self, last_totals, self.table, totals, forget=lambda: totals.take(None))
        self._registry = DynamoRegistry(self)
        self._editor = DynamoEditor(self)
        self.claims = DynamoClaims(self)

    def editing(self) -> DynamoEditor:
        return self._editor

    def topics(self) -> DynamoRegistry:
        return self._registry

    def consumers(self) -> DynamoRegistry:
        return self._registry

    @property
    def key(self) -> str:
        return f"dynamodb:{self.table.endpoint_url or self.table.region}/{self.table.name}"

    @property
    def poll_interval(self) -> float:
        return self._poll_interval

    @property
    def first_poll_interval(self) -> float:
        # each receive is a paid request (and milliseconds of botocore's CPU): a 2 s long
        # poll on an empty queue makes 5 of them rather than 9
        return min(0.25, self._poll_interval)

    def close(self) -> None:
        with contextlib.suppress(ConveyorError):  # a table gone or unreachable: counts too
            self.accounts.close()
        self.table.close()

    def migrate(self) -> tuple[int, int] | None:
        self._prepare()
        return (0 if self.table.created else self._schema_found, SCHEMA_VERSION)

    # -- requests -------------------------------------------------------------------------

    def call(self, operation: str, **kwargs: Any) -> Any:
        if not self._prepared:
            self._prepare()
        return self.table.call(operation, TableName=self.table.name, **kwargs)

    def query_items(self, **kwargs: Any) -> Iterator[Item]:
        if not self._prepared:
            self._prepare()
        return self.table.query(**kwargs)

    def _transact(self, actions: list[dict[str, Any]]) -> None:
        for action in actions:
            next(iter(action.values()))["TableName"] = self.table.name
        self.table.transact(actions)

    def _prepare(self) -> None:
        """Make the table ready; a table Conveyor did not create is DynamoMQ's: register its
        two queues (once)."""
        self.table.ensure()
        got = self.table.call(
            "get_item", TableName=self.table.name, Key={"id": s(META_ID)}, ConsistentRead=True
        )
        if "Item" in got:
            self._schema_found = int(got["Item"].get("schema", {}).get("N", "1"))
            if self._schema_found > SCHEMA_VERSION:
                raise StoreUnavailable(
                    f"the table {self.table.name} has schema version {self._schema_found},"
                    f" newer than this Conveyor ({SCHEMA_VERSION}): upgrade Conveyor"
                )
        else:
            if not self.table.created:
                now = self.clock.now()
                for name in reversed(COMPAT):  # the DLQ first: the standard queue names it
                    attrs = QueueAttributes(
                        dead_letter=DeadLetterPolicy(
                            queue="DLQ", max_receive_count=COMPAT_MAX_RECEIVES
                        )
                        if name == "STANDARD"
                        else None
                    )
                    entry = Entry(name, name, "", attrs, now, now, compat=True)
                    with contextlib.suppress(ConditionFailed):
                        self.table.call(
                            "put_item",
                            TableName=self.table.name,
                            Item=entry.item(),
                            **expr(ConditionExpression="attribute_not_exists(#id)"),
                        )
            with contextlib.suppress(ConditionFailed):
                self.table.call(
                    "put_item",
                    TableName=self.table.name,
                    Item={"id": s(META_ID), "schema": n(SCHEMA_VERSION)},
                    **expr(ConditionExpression="attribute_not_exists(#id)"),
                )
        self._prepared = True

    # -- the queue registry ---------------------------------------------------------------

    def queue_entry(self, name: str, *, fresh: bool = False) -> Entry:
        now = self.clock.now()
        hit = self._entries.get(name)
        if hit is not None and not fresh and 0.0 <= now - hit[0] < QUEUE_CACHE_SECONDS:
            return hit[1]
        got = self.call("get_item", Key=queue_id(name), ConsistentRead=True)
        if "Item" not in got:
            self._entries.pop(name, None)
            raise no_queue(name)
        entry = entry_of(got["Item"])
        self._entries[name] = (now, entry)
        return entry

    def maybe_entry(self, name: str) -> Entry | None:
        try:
            return self.queue_entry(name)
        except ConveyorError:
            return None

    def create_queue(self, name: str, attributes: QueueAttributes) -> tuple[QueueInfo, bool]:
        now = self.clock.now()
        qt = f"conveyor#{name}#{secrets.token_hex(4)}"
        entry = Entry(name, qt, f"{qt}#", attributes, now, now)
        try:
            self.call(
                "put_item",
                Item=entry.item(),
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
                **expr(ConditionExpression="attribute_not_exists(#id)"),
            )
        except ConditionFailed as exc:
            old = entry_of(exc.item) if exc.item else self.queue_entry(name, fresh=True)
            if old.attrs != attributes:
                raise queue_exists(name) from None
            return queue_info(old), False
        self._entries[name] = (now, entry)
        return queue_info(entry), True

    def delete_queue(self, name: str) -> None:
        entry = self.queue_entry(name, fresh=True)
        try:
            self.call(
                "delete_item",
                Key=queue_id(name),
                **expr(ConditionExpression="attribute_exists(#id)"),
            )
        except ConditionFailed:
            raise no_queue(name) from None
        self._entries.pop(name, None)
        self.accounts.forget(entry.qt)
        self._drop_items(entry.qt)
        self._drop_items(f"{entry.qt}#dedup")
        self._registry.drop_subscriptions(name)

    def _drop_items(self, qt: str) -> int:
        """Delete every item whose queue_type is `qt`, 25 to a request."""
        keys = [
            {"id": item["id"]}
            for item in self.query_items(
                IndexName=self.table.index,
                ExpressionAttributeValues={":q": s(qt)},
                **expr(KeyConditionExpression="#queue_type = :q", ProjectionExpression="#id"),
            )
        ]
        for i in range(0, len(keys), 25):
            requests = [{"DeleteRequest": {"Key": k}} for k in keys[i : i + 25]]
            while requests:
                out = self.table.call("batch_write_item", RequestItems={self.table.name: requests})
                requests = out.get("UnprocessedItems", {}).get(self.table.name, [])
        return len(keys)

    def registry(self, kind: str, prefix: str = "") -> Iterator[Item]:
        """The registry items of a kind (queues, topics, consumers), in name order."""
        if prefix:
            return self.query_items(
                IndexName=self.table.index,
                ExpressionAttributeValues={":k": s(kind), ":p": s(prefix)},
                **expr(KeyConditionExpression="#queue_type = :k AND begins_with(#sent_at, :p)"),
            )
        return self.query_items(
            IndexName=self.table.index,
            ExpressionAttributeValues={":k": s(kind)},
            **expr(KeyConditionExpression="#queue_type = :k"),
        )

    def list_queues(self, prefix: str = "") -> list[str]:
        return sorted(item["sent_at"]["S"] for item in self.registry(QUEUES, prefix))

    def get_queue(self, name: str) -> QueueInfo:
        return queue_info(self.queue_entry(name, fresh=True))

    def set_queue_attributes(self, name: str, attributes: QueueAttributes) -> QueueInfo:
        entry = self.queue_entry(name, fresh=True)
        now = self.clock.now()
        new = dataclasses.replace(entry, attrs=attributes, updated_at=now)
        try:
            self.call(
                "put_item",
                Item=new.item(),
                ExpressionAttributeValues={":qt": s(entry.qt)},
                **expr(ConditionExpression="#qt = :qt"),
            )
        except ConditionFailed:
            raise no_queue(name) from None
        self._entries[name] = (now, new)
        return queue_info(new)

    def purge_queue(self, name: str) -> int:
        entry = self.queue_entry(name, fresh=True)
        self._drop_items(f"{entry.qt}#dedup")
        self.claims.forget(entry.qt)
        return self._drop_items(entry.qt)

    def queue_docs(self, entry: Entry) -> Iterator[Doc]:
        """Every message of a queue (DynamoMQ's index: one partition per queue)."""
        for item in self.query_items(
            IndexName=self.table.index,
            ExpressionAttributeValues={":q": s(entry.qt)},
            **expr(KeyConditionExpression="#queue_type = :q"),
        ):
            yield doc_of(item, entry)

    def queue_stats(self, name: str) -> QueueStats:
        return self.accounts.stats(name)

    # -- sending --------------------------------------------------------------------------

    def _dedup_holder(self, entry: Entry, key: str) -> str:
        got = self.call(
            "get_item", Key={"id": s(dedup_record_id(entry.qt, key))}, ConsistentRead=True
        )
        return text(got.get("Item", {}), "mid") or ""

    def _store(self, writes: list[tuple[Entry, Doc]], now: float) -> dict[int, str]:
        """Store new messages (each in its queue) all together, in one transaction; returns,
        by index in `writes`, the id each duplicate duplicates (its own for an id the queue
        holds, the first sender's for a FIFO de-duplication key seen in the window)."""
        duplicates: dict[int, str] = {}
        pending = list(range(len(writes)))
        while pending:
            actions: list[dict[str, Any]] = []
            owners: list[tuple[int, bool]] = []  # (index in writes, is its dedup record)
            for i in pending:
                for j, action in enumerate(put_actions(*writes[i], now)):
                    actions.append(action)
                    owners.append((i, j == 1))
            if len(actions) > MAX_ACTIONS:
                raise InvalidInput(
                    f"one send or publish writes at most {MAX_ACTIONS} items to DynamoDB in"
                    " one transaction; send fewer messages, or subscribe fewer queues"
                )
            try:
                if len(actions) == 1:
                    self.call("put_item", **actions[0]["Put"])
                else:
                    self._transact(actions)
                return duplicates
            except ConditionFailed:
                failed = [0]
            except Cancelled as exc:
                failed = exc.failed
            for k in failed:
                i, is_dedup = owners[k]
                if i in duplicates:
                    continue
                entry, doc = writes[i]
                duplicates[i] = (
                    self._dedup_holder(entry, doc.dkey) if is_dedup and doc.dkey else doc.mid
                )
            pending = [i for i in pending if i not in duplicates]
        return duplicates

    def send(self, queue: str, messages: Sequence[NewMessage]) -> list[SendResult]:
        entry = self.queue_entry(queue)
        now = self.clock.now()
        fifo = entry.attrs.fifo
        mine = [m.generated_id or not m.id for m in messages]
        fresh = iter(new_ids(sum(mine)))
        first = self.order.take(len(messages))
        results: list[SendResult | None] = []
        docs: list[Doc] = []
        places: list[int] = []
        seen_ids: set[str] = set()
        seen_keys: dict[str, str] = {}
        for i, (m, own) in enumerate(zip(messages, mine, strict=True)):
            mid = next(fresh) if own else m.id
            doc = new_doc(entry, m, mid, first + i, now)
            key = doc.dkey
            if mid in seen_ids:
                results.append(SendResult(id=mid, duplicate=True))
                continue
            if key is not None and key in seen_keys:
                results.append(SendResult(id=seen_keys[key], duplicate=True))
                continue
            seen_ids.add(mid)
            if key is not None:
                seen_keys[key] = mid
            docs.append(doc)
            places.append(len(results))
            results.append(None)
        duplicates = self._store([(entry, d) for d in docs], now) if docs else {}
        self.accounts.count(entry, "sent", len(docs) - len(duplicates))
        woken = False
        for i, (doc, place) in enumerate(zip(docs, places, strict=True)):
            if i in duplicates:
                results[place] = SendResult(id=duplicates[i], duplicate=True)
                continue
            results[place] = (
                SendResult(id=doc.mid, sequence=doc.order) if fifo else sent_result(doc.mid)
            )
            if doc.vis <= now:
                woken = True
            else:
                self.note_due(entry, doc.vis)
        if woken:
            self.notify(queue)
        return [r for r in results if r is not None]

    def fan_out(self, copies: list[tuple[str, NewMessage]]) -> dict[str, SendResult]:
        """A topic's publish: each copy into its queue, in one transaction."""
        now = self.clock.now()
        names = [name for name, _ in copies]
        entries = [self.queue_entry(name) for name in names]
        seq = self.order.take(len(entries))
        docs = [
            new_doc(e, message, message.id, seq + i, now)
            for i, (e, (_, message)) in enumerate(zip(entries, copies, strict=True))
        ]
        duplicates = self._store(list(zip(entries, docs, strict=True)), now)
        out: dict[str, SendResult] = {
            entries[i].name: SendResult(id=original, duplicate=True)
            for i, original in duplicates.items()
        }
        for i, e in enumerate(entries):
            if e.name not in out:
                doc, mid = docs[i], copies[i][1].id
                out[e.name] = (
                    SendResult(id=mid, sequence=doc.order) if e.attrs.fifo else sent_result(mid)
                )
                self.accounts.count(e, "sent")
                self.notify(e.name)
        return {name: out[name] for name in names}

    # -- receiving (claims.py) --------------------------------------------------------------

    def receive(self, queue: str, max_messages: int, visibility_timeout: float) -> list[Message]:
        return self.claims.receive(queue, max_messages, visibility_timeout)

    def note_due(self, entry: Entry, when: float) -> None:
        """This process made a message invisible until `when`: look for due ones then."""
        self.claims.note_due(entry, when)

    # -- receipts -------------------------------------------------------------------------

    def delete(self, queue: str, receipts: Sequence[str]) -> list[Exception | None]:
        entry = self.queue_entry(queue)
        results: list[Exception | None] = []
        # message id -> its receipts' tokens, in order, with their result's index: at most
        # one token of a message holds, and an earlier receipt may come before it
        held: dict[str, list[tuple[str, int]]] = {}
        for receipt in receipts:
            try:
                _, mid, token = parse_receipt(queue, receipt)
            except ConveyorError as exc:
                results.append(exc)
                continue
            tokens = held.setdefault(mid, [])
            if any(t == token for t, _ in tokens):
                results.append(stale_receipt(mid))  # the same receipt again: one delete
                continue
            tokens.append((token, len(results)))
            results.append(None)
        tried = dict.fromkeys(held, 0)  # which of its tokens a message's delete tries
        pending = list(held)
        while pending:
            actions = [
                {
                    "Delete": {
                        "Key": {"id": s(entry.item_id(mid))},
                        "ExpressionAttributeValues": {":t": s(held[mid][tried[mid]][0])},
                        **expr(ConditionExpression="#tok = :t"),
                    }
                }
                for mid in pending
            ]
            try:
                if len(actions) == 1:
                    self.call("delete_item", **actions[0]["Delete"])
                else:
                    self._transact(actions)
                self.accounts.count(entry, "deleted", len(pending))
                break
            except ConditionFailed:
                failed = [0]
            except Cancelled as exc:
                failed = exc.failed
            for k in failed:  # that token no longer holds: try the message's next one
                mid = pending[k]
                results[held[mid][tried[mid]][1]] = stale_receipt(mid)
                tried[mid] += 1
            pending = [mid for mid in pending if tried[mid] < len(held[mid])]
        for mid, tokens in held.items():  # the tokens after the one that deleted it
            for _, index in tokens[tried[mid] + 1 :]:
                results[index] = stale_receipt(mid)
        return results

    def change_visibility(
        self, queue: str, entries: Sequence[tuple[str, float]]
    ) -> list[Exception | None]:
        return self._by_receipt(queue, entries, back=False)

    def give_back(self, queue: str, receipts: Sequence[str]) -> list[Exception | None]:
        return self._by_receipt(queue, [(receipt, 0.0) for receipt in receipts], back=True)

    def _by_receipt(
        self, queue: str, entries: Sequence[tuple[str, float]], *, back: bool
    ) -> list[Exception | None]:
        """Each message visible at now + timeout where its receipt's token holds it; with
        `back`, given back as though that receive had not been made (`give_back`)."""
        entry = self.queue_entry(queue)
        now = self.clock.now()
        results: list[Exception | None] = []
        released = False
        for receipt, timeout in entries:
            try:
                _, mid, token = parse_receipt(queue, receipt)
            except ConveyorError as exc:
                results.append(exc)
                continue
            vis = now + timeout
            values: dict[str, Any] = {
                ":t": s(token),
                ":one": n(1),
                ":vis": n(vis),
                ":vist": s(rfc3339(vis) if vis > now else ""),
                ":nowt": s(rfc3339(now)),
            }
            update = (
                "SET #version = #version + :one, #vis = :vis, #invisible_until_at = :vist,"
                " #updated_at = :nowt"
            )
            removed = []
            if not entry.compat:
                values[":q"] = s(entry.qt)
                update += ", #fq = :q, #fk = :vis"
                removed += ["#rq", "#rk"]
            try:
                if back:
                    got = self._give_back(entry, mid, values, update, removed)
                else:
                    got = self.call(
                        "update_item",
                        Key={"id": s(entry.item_id(mid))},
                        ReturnValues="ALL_NEW",
                        ExpressionAttributeValues=values,
                        **expr(UpdateExpression=_removing(update, removed),
                               ConditionExpression="#tok = :t"),
                    )  # fmt: skip
            except ConditionFailed:
                results.append(stale_receipt(mid))
                continue
            results.append(None)
            if entry.compat:
                released = released or vis <= now
            elif vis <= now:
                self.claims.release(entry, got["Attributes"])
                released = True
            else:
                self.note_due(entry, vis)
        if released:
            self.notify(queue)
        return results

    def _give_back(
        self, entry: Entry, mid: str, values: dict[str, Any], update: str, removed: list[str]
    ) -> Any:
        """The update of `_by_receipt` that also takes the receive back: the count one
        lower, the token gone and, where the count is back to 0, the first receive (two
        conditional attempts, one for each case). ConditionFailed where the token no longer
        holds the message."""
        key = {"id": s(entry.item_id(mid))}
        try:  # received once: never received, as far as anyone can tell
            got = self.call(
                "update_item",
                Key=key,
                ReturnValues="ALL_NEW",
                ExpressionAttributeValues={**values, ":zero": n(0)},
                **expr(
                    UpdateExpression=_removing(
                        update + ", #receive_count = :zero",
                        [*removed, "#tok", "#frx", "#received_at"],
                    ),
                    ConditionExpression="#tok = :t AND #receive_count <= :one",
                ),
            )
        except ConditionFailed:
            got = self.call(
                "update_item",
                Key=key,
                ReturnValues="ALL_NEW",
                ExpressionAttributeValues=values,
                **expr(
                    UpdateExpression=_removing(
                        update + ", #receive_count = #receive_count - :one", [*removed, "#tok"]
                    ),
                    ConditionExpression="#tok = :t AND #receive_count > :one",
                ),
            )
        return got

    # -- reading and editing --------------------------------------------------------------

    def read_doc(self, entry: Entry, item: Item) -> Doc | None:
        got = self.call("get_item", Key={"id": item["id"]}, ConsistentRead=True)
        found = got.get("Item")
        if found is None or text(found, "queue_type") != entry.qt:
            return None
        return doc_of(found, entry)

    def message_doc(self, entry: Entry, message_id: str) -> Doc:
        doc = self.read_doc(entry, {"id": s(entry.item_id(message_id))})
        if doc is None:
            raise no_message(entry.name, message_id)
        return doc

    def move(
        self,
        src: Entry,
        doc: Doc,
        dest: Entry,
        now: float,
        *,
        dead_from: str | None,
        error: str | None,
    ) -> Doc:
        """Move a message to the back of another queue, replacing one of the same id there.
        Into a dead-letter queue it keeps sent_at and records the source and error; out of
        one (a redrive) it is sent now, source and error cleared. ConditionFailed or
        Cancelled if the message changed since it was read."""
        moved = dataclasses.replace(
            doc,
            qt=dest.qt,
            pri=0 if dest.attrs.fifo else doc.pri,
            seq=self.order.take(1),
            rc=0,
            frx=None,
            vis=now,
            version=1,
            tok=None,
            sat=doc.sat if dead_from is not None else now,
            src=dead_from,
            err=(error or doc.err) if dead_from is not None else None,
            entered_at=now,
        )
        old = n(doc.version)
        if src.item_id(doc.mid) == dest.item_id(doc.mid):  # DynamoMQ's two queues: in place
            moved.version = doc.version + 1
            self.call(
                "put_item",
                Item=doc_item(moved, dest, now),
                ExpressionAttributeValues={":v": old, ":q": s(src.qt)},
                **expr(ConditionExpression="#version = :v AND #queue_type = :q"),
            )
        else:
            self._transact(
                [
                    {
                        "Delete": {
                            "Key": {"id": s(src.item_id(doc.mid))},
                            "ExpressionAttributeValues": {":v": old},
                            **expr(ConditionExpression="#version = :v"),
                        }
                    },
                    {"Put": {"Item": doc_item(moved, dest, now)}},
                ]
            )
        return moved


def _removing(update: str, removed: list[str]) -> str:
    """An update expression's SET part, then a REMOVE of `removed` where there are any."""
    return f"{update} REMOVE {', '.join(removed)}" if removed else update
