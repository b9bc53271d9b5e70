"""The DynamoDB store's receives: claims by a conditional update on a message's `version`
(of two receivers, one wins and the other moves on), read from the sparse index of ready
messages; a receive first releases the delayed and in-flight messages whose time has come
from the waiting index. FIFO queues walk their groups in order, one message of a group in
flight at a time.
"""

from __future__ import annotations

import contextlib
import math
import secrets
from typing import TYPE_CHECKING, Any, Literal

from ...models import Message
from ...receipts import claim_token, make_receipt
from ..rules import ClaimTerms, GroupFill, claim_terms, claimed_until, expired
from .items import Doc, Entry, doc_of, n, num, rank, rfc3339, s, text
from .table import READY_INDEX, WAITING_INDEX, Cancelled, ConditionFailed, Item, expr

if TYPE_CHECKING:
    from .store import DynamoStore

READY_PAGES = 10  # pages of the ready index one receive reads at most
# rounds of one FIFO receive at most while what it chose expired or went to the dead-letter
# queue (a round goes on only when one it chose left the queue, or another receiver's
# change got there first)
FIFO_ROUNDS = 64
WAITING_PAGE = 50  # due messages one receive releases at most


class DynamoClaims:
    """A store's receives, and what this process knows of when its queues' waiting messages
    fall due."""

    def __init__(self, store: DynamoStore) -> None:
        self.store = store
        self._due: dict[str, tuple[float, float]] = {}  # qt -> (checked at, next due)

    def forget(self, qt: str) -> None:
        """The queue's messages changed wholesale (a purge): look again at the next receive."""
        self._due.pop(qt, None)

    def note_due(self, entry: Entry, when: float) -> None:
        """This process made a message invisible until `when`: look for due ones then."""
        hit = self._due.get(entry.qt)
        if hit is not None and when < hit[1]:
            self._due[entry.qt] = (hit[0], when)

    def release(self, entry: Entry, item: Item) -> None:
        """Move a message whose time has come from the waiting index to the ready one."""
        seq = int(num(item, "seq") or 0)
        pri = int(num(item, "pri") or 0)
        # changed since, it is left to whoever changed it (who placed it)
        with contextlib.suppress(ConditionFailed):
            self.store.call(
                "update_item",
                Key={"id": item["id"]},
                ExpressionAttributeValues={
                    ":q": s(entry.qt),
                    ":rk": s(rank(pri, seq)),
                    ":v": item["version"],
                },
                **expr(
                    UpdateExpression="SET #rq = :q, #rk = :rk REMOVE #fq, #fk",
                    ConditionExpression="#version = :v AND attribute_exists(#fq)",
                ),
            )

    def _promote(self, entry: Entry, now: float) -> None:
        """Release what became visible by `now` (at most WAITING_PAGE messages a call)."""
        hit = self._due.get(entry.qt)
        if hit is not None and now < hit[1] and 0.0 <= now - hit[0] < self.store.poll_interval:
            return
        out = self.store.call(
            "query",
            IndexName=WAITING_INDEX,
            Limit=WAITING_PAGE,
            ExpressionAttributeValues={":q": s(entry.qt)},
            **expr(KeyConditionExpression="#fq = :q"),
        )
        items = out.get("Items", [])
        next_due = math.inf
        for item in items:
            due = float(item["fk"]["N"])
            if due > now:
                next_due = due
                break
            self.release(entry, item)
        else:
            if len(items) == WAITING_PAGE:
                next_due = now  # more may be due: look again next time
        self._due[entry.qt] = (now, next_due)

    def _blocked(self, entry: Entry, now: float) -> dict[str | None, int]:
        """FIFO: per group, the lowest sequence of its messages that are not visible (in
        flight or delayed); its messages from there on wait."""
        blocked: dict[str | None, int] = {}
        for item in self.store.query_items(
            IndexName=WAITING_INDEX,
            ExpressionAttributeValues={":q": s(entry.qt), ":now": n(now)},
            **expr(KeyConditionExpression="#fq = :q AND #fk > :now"),
        ):
            group = text(item, "grp")
            seq = int(num(item, "seq") or 0)
            blocked[group] = min(seq, blocked.get(group, seq))
        return blocked

    def receive(self, queue: str, max_messages: int, visibility_timeout: float) -> list[Message]:
        entry = self.store.queue_entry(queue)
        now = self.store.clock.now()
        terms = claim_terms(entry.attrs, now, visibility_timeout)
        token = claim_token(now)
        if entry.compat:
            out = self._receive_walk(entry, max_messages, terms, token)
        else:
            out = self._receive_ready(entry, max_messages, terms, token)
        if out:
            self.note_due(entry, min(m.visible_at for m in out))
            self.store.accounts.count(entry, "received", len(out))
        return out

    def _receive_ready(
        self, entry: Entry, limit: int, terms: ClaimTerms, token: str
    ) -> list[Message]:
        now = terms.now
        self._promote(entry, now)
        if entry.attrs.fifo:
            out: list[Message] = []
            for _ in range(FIFO_ROUNDS):  # again while expired or dead-lettered ones left room
                got, gone = self._receive_fifo(entry, limit - len(out), terms, token)
                out += got
                if not gone or len(out) >= limit:
                    break
            return out
        out = []
        start: dict[str, Any] | None = None
        for _ in range(READY_PAGES):
            got = self._ready_page(entry, 2 * (limit - len(out)) + 2, start)
            items = got.get("Items", [])
            contended = False
            while items:
                if len(out) >= limit:
                    break
                # in order while uncontended; once another receiver won a claim, the rest of
                # the page in random order, so that receivers stop racing for the same head
                item = items.pop(secrets.randbelow(len(items)) if contended else 0)
                if (num(item, "vis") or 0.0) > now:  # placed by a clock ahead of this one
                    continue
                m = self._take(entry, item, terms, token, compat=False)
                if isinstance(m, Message):
                    out.append(m)
                elif m == "held":
                    contended = True
            start = got.get("LastEvaluatedKey")
            if not start or len(out) >= limit:
                break
        return out

    def _ready_page(self, entry: Entry, limit: int, start: dict[str, Any] | None) -> Any:
        """A page of the queue's ready index, in delivery order, from `start`."""
        page: dict[str, Any] = {"ExclusiveStartKey": start} if start else {}
        return self.store.call(
            "query",
            IndexName=READY_INDEX,
            Limit=limit,
            ExpressionAttributeValues={":q": s(entry.qt)},
            **page,
            **expr(KeyConditionExpression="#rq = :q"),
        )

    def _receive_fifo(
        self, entry: Entry, limit: int, terms: ClaimTerms, token: str
    ) -> tuple[list[Message], bool]:
        """FIFO: the ready index in send order, skipping each group from its first message
        that is not visible; groups in the order they opened (rules.GroupFill). The
        messages claimed, and whether a chosen one expired or went to the dead-letter queue
        instead."""
        now = terms.now
        blocked = self._blocked(entry, now)
        fill: GroupFill[int] = GroupFill(limit)
        items: dict[int, Item] = {}
        start: dict[str, Any] | None = None
        for _ in range(READY_PAGES):
            got = self._ready_page(entry, 100, start)
            for item in got.get("Items", []):
                visible_at = num(item, "vis") or 0.0
                fill.step(visible_at, int(num(item, "receive_count") or 0))
                group = text(item, "grp")
                seq = int(num(item, "seq") or 0)
                if seq > blocked.get(group, seq):
                    continue
                if visible_at > now:  # placed by a clock ahead of this one
                    blocked[group] = min(seq, blocked.get(group, seq))
                    continue
                items[seq] = item
                fill.add(group, seq, visible_at)
                if fill.done:
                    break
            start = got.get("LastEvaluatedKey")
            if not start or fill.done:
                break
        out: list[Message] = []
        stopped: set[str | None] = set()
        gone = False
        for seq in fill.chosen():
            item = items[seq]
            group = text(item, "grp")
            if group in stopped:
                continue
            m = self._take(entry, item, terms, token, compat=False)
            if isinstance(m, Message):
                out.append(m)
            elif m == "held":  # another receiver has it: the rest of its group waits
                stopped.add(group)
            else:
                gone = True
        return out, gone

    def _receive_walk(
        self, entry: Entry, limit: int, terms: ClaimTerms, token: str
    ) -> list[Message]:
        """DynamoMQ's queues: walk DynamoMQ's index in send order, as DynamoMQ does, and
        claim the first ready messages (delay enforced, unlike DynamoMQ)."""
        out: list[Message] = []
        for item in self.store.query_items(
            IndexName=self.store.table.index,
            Limit=250,
            ExpressionAttributeValues={":q": s(entry.qt)},
            **expr(KeyConditionExpression="#queue_type = :q"),
        ):
            doc = doc_of(item, entry)
            if doc.vis > terms.now:
                continue
            m = self._take(entry, item, terms, token, compat=True, doc=doc)
            if isinstance(m, Message):
                out.append(m)
                if len(out) >= limit:
                    break
        return out

    def _take(
        self,
        entry: Entry,
        item: Item,
        terms: ClaimTerms,
        token: str,
        *,
        compat: bool,
        doc: Doc | None = None,
    ) -> Message | Literal["gone", "held"]:
        """Expire, dead-letter or claim one candidate: the claimed message, "gone" (expired
        or moved to the dead-letter queue) or "held" (another receiver claimed it first)."""
        now = terms.now
        sent = num(item, "sat") if doc is None else doc.sat
        deadline = num(item, "dl") if doc is None else doc.dl
        count = int(num(item, "receive_count") or 0) if doc is None else doc.rc
        version = item["version"]
        if expired(sent, deadline, terms.horizon, terms.expires):
            with contextlib.suppress(ConditionFailed):
                self.store.call(
                    "delete_item",
                    Key={"id": item["id"]},
                    ExpressionAttributeValues={":v": version},
                    **expr(ConditionExpression="#version = :v"),
                )
                self.store.accounts.count(entry, "expired")
            return "gone"
        policy = entry.attrs.dead_letter
        if policy is not None and count >= policy.max_receive_count:
            dlq = self.store.maybe_entry(policy.queue)
            if dlq is not None:
                full = doc or self.store.read_doc(entry, item)
                if full is not None and full.version == int(version["N"]):
                    try:
                        self.store.move(entry, full, dlq, now, dead_from=entry.name, error=None)
                        self.store.accounts.count(entry, "dead")
                        self.store.notify(dlq.name)
                    except (ConditionFailed, Cancelled):
                        return "held"
                    return "gone"
                return "held"
        until = claimed_until(terms, deadline)
        values: dict[str, Any] = {
            ":one": n(1),
            ":v": version,
            ":vis": n(until),
            ":vist": s(rfc3339(until)),
            ":tok": s(token),
            ":now": n(now),
            ":nowt": s(rfc3339(now)),
        }
        update = (
            "SET #version = #version + :one, #receive_count = #receive_count + :one,"
            " #vis = :vis, #tok = :tok, #received_at = :nowt, #updated_at = :nowt,"
            " #invisible_until_at = :vist, #frx = if_not_exists(#frx, :now)"
        )
        if compat:
            condition = "#version = :v"
            if doc is not None:
                values[":mid"] = s(doc.mid)
                values[":seq"] = n(doc.seq)
                update += ", #mid = if_not_exists(#mid, :mid), #seq = if_not_exists(#seq, :seq)"
        else:
            condition = "#version = :v AND attribute_exists(#rq)"
            values[":q"] = s(entry.qt)
            update += ", #fq = :q, #fk = :vis REMOVE #rq, #rk"
        try:
            got = self.store.call(
                "update_item",
                Key={"id": item["id"]},
                ReturnValues="ALL_NEW",
                ExpressionAttributeValues=values,
                **expr(UpdateExpression=update, ConditionExpression=condition),
            )
        except ConditionFailed:
            return "held"
        claimed = doc_of(got["Attributes"], entry)
        return claimed.message(
            entry.name, make_receipt(entry.name, claimed.seq, claimed.mid, token)
        )
