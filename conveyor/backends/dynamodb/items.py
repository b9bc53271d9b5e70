"""How queues, messages, topics and consumers are stored as items of one DynamoDB table.

Every item has the partition key `id`. A message keeps DynamoMQ's attributes, in DynamoMQ's
formats, so DynamoMQ's tools and consumers read it: `id`, `data`, `receive_count`,
`queue_type`, `version`, `created_at`, `updated_at`, `sent_at`, `received_at`,
`invisible_until_at` (times as RFC 3339 text in UTC). Conveyor's own fields sit beside them
(`mid`, `seq`, `pri`, `vis`, `sat`, ...; see `Doc`), and the keys of two sparse indexes
place a message where receives find it: `rq`/`rk` (ready, in delivery order) or `fq`/`fk`
(invisible until `fk`: delayed or in flight). A FIFO queue's de-duplication key is an item
of its own while its window lasts (`dedup_record_id`), written with the message it names.
"""

from __future__ import annotations

import calendar
import json
import threading
import time
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

from ...models import (
    FAR_FUTURE,
    Consumer,
    Message,
    NewMessage,
    QueueAttributes,
    QueueInfo,
    message_from,
)
from ...validation import DEDUP_WINDOW
from ..codec import decode_attributes, encode_attributes
from ..rules import dedup, order_key
from .table import Item, expr

QUEUES = "conveyor#queues"  # queue_type of the queue registry's items
TOPICS = "conveyor#topics"
CONSUMERS = "conveyor#consumers"
COMPAT = ("STANDARD", "DLQ")  # DynamoMQ's two queues, named by their queue_type
COMPAT_MAX_RECEIVES = 1000  # DynamoMQ has no limit; SQS's highest is the dead-letter policy
EPOCH = 1_704_067_200  # 2024-01-01: sequences count milliseconds from here

_deserialize = TypeDeserializer().deserialize
_serialize = TypeSerializer().serialize


def s(value: str) -> dict[str, Any]:
    return {"S": value}


def n(value: float | int) -> dict[str, Any]:
    return {"N": repr(value) if isinstance(value, float) else str(value)}


def num(item: Item, name: str) -> float | None:
    v = item.get(name)
    return float(v["N"]) if v is not None and "N" in v else None


def text(item: Item, name: str) -> str | None:
    v = item.get(name)
    return v["S"] if v is not None and "S" in v else None


# -- times as DynamoMQ writes them ------------------------------------------------------------


def rfc3339(t: float) -> str:
    """A time as Go's RFC3339Nano in UTC (trailing zeros of the fraction dropped)."""
    t = min(t, FAR_FUTURE)
    sec = int(t // 1)
    nanos = round((t - sec) * 1e9)
    if nanos >= 1_000_000_000:
        sec, nanos = sec + 1, 0
    out = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
    if nanos:
        out += "." + f"{nanos:09d}".rstrip("0")
    return out + "Z"


def parse_time(value: str | None) -> float | None:
    """Seconds since the epoch from RFC 3339 text (any fraction, Z or an offset)."""
    if not value:
        return None
    try:
        body, zone = value, 0
        if body.endswith(("Z", "z")):
            body = body[:-1]
        elif len(body) > 6 and body[-6] in "+-" and body[-3] == ":":
            sign = 1 if body[-6] == "+" else -1
            zone = sign * (int(body[-5:-3]) * 3600 + int(body[-2:]) * 60)
            body = body[:-6]
        whole, _, frac = body.partition(".")
        base = calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S"))
        return base - zone + (int(frac) / 10 ** len(frac) if frac else 0.0)
    except ValueError:
        return None


# -- sequences --------------------------------------------------------------------------------


class Sequence:
    """Send order across processes: milliseconds since EPOCH times 64, and never less than
    the last one this process handed out plus one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = 0

    def take(self, count: int) -> int:
        """The first of `count` consecutive sequence numbers."""
        base = max(0, int((time.time() - EPOCH) * 1000)) << 6
        with self._lock:
            first = max(self._last + 1, base)
            self._last = first + count - 1
        return first


def seq_of_time(t: float) -> int:
    return max(0, int((t - EPOCH) * 1000)) << 6


def rank(priority: int, seq: int) -> str:
    """The ready index's sort key: delivery order as fixed-width text."""
    return f"{order_key(priority, seq):019d}"


# -- the queue registry -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Entry:
    """A queue: its `queue_type` value, the prefix of its messages' ids, its attributes.
    DynamoMQ's queues (`compat`) share the prefix "" and are read through DynamoMQ's index."""

    name: str
    qt: str
    kp: str
    attrs: QueueAttributes
    created_at: float
    updated_at: float
    compat: bool = False

    def item_id(self, message_id: str) -> str:
        return self.kp + message_id

    def item(self) -> Item:
        return {
            "id": s(f"conveyor#queue#{self.name}"),
            "queue_type": s(QUEUES),
            "sent_at": s(self.name),
            "qt": s(self.qt),
            "kp": s(self.kp),
            "attrs": s(json.dumps(self.attrs.to_dict(), sort_keys=True)),
            "created": n(self.created_at),
            "updated": n(self.updated_at),
            "compat": {"BOOL": self.compat},
        }


def queue_id(name: str) -> dict[str, Any]:
    return {"id": s(f"conveyor#queue#{name}")}


def entry_of(item: Item) -> Entry:
    return Entry(
        name=item["sent_at"]["S"],
        qt=item["qt"]["S"],
        kp=item["kp"]["S"],
        attrs=QueueAttributes.from_dict(json.loads(item["attrs"]["S"])),
        created_at=float(item["created"]["N"]),
        updated_at=float(item["updated"]["N"]),
        compat=bool(item.get("compat", {}).get("BOOL", False)),
    )


# -- messages ---------------------------------------------------------------------------------


@dataclass(slots=True)
class Doc:
    """A message item, decoded. Times are seconds since the epoch."""

    mid: str
    qt: str
    body: bytes
    attributes: dict[str, Any]
    grp: str | None
    ddk: str | None
    pri: int
    seq: int
    dl: float | None
    sat: float  # sent at (retention counts from here)
    vis: float  # visible at
    rc: int  # receive count
    frx: float | None  # first received at
    version: int
    tok: str | None  # the last receive's token
    src: str | None
    err: str | None
    z: bool  # compressed
    entered_at: float  # when it entered this queue (DynamoMQ's sent_at: its index order)
    created: str | None = None  # DynamoMQ's created_at, as written
    extra: Item = field(default_factory=dict)  # attributes of others, kept on rewrite
    dkey: str | None = None  # a send's FIFO de-duplication key (its own item, not this one)

    @property
    def order(self) -> int:
        return order_key(self.pri, self.seq)

    def message(self, queue: str, receipt: str | None = None) -> Message:
        return message_from(
            {
                "sequence": self.order,
                "id": self.mid,
                "queue": queue,
                "body": self.body,
                "attributes": self.attributes,
                "group_id": self.grp,
                "dedup_id": self.ddk,
                "priority": self.pri,
                "deadline": self.dl,
                "sent_at": self.sat,
                "visible_at": self.vis,
                "receive_count": self.rc,
                "first_received_at": self.frx,
                "version": self.version,
                "source_queue": self.src,
                "error": self.err,
                "compressed": self.z,
                "receipt": receipt,
            }
        )


KNOWN = {
    "id", "data", "receive_count", "queue_type", "version", "created_at", "updated_at",
    "sent_at", "received_at", "invisible_until_at", "mid", "seq", "pri", "vis", "sat", "attrs",
    "grp", "ddk", "dl", "frx", "tok", "src", "err", "z", "rq", "rk", "fq", "fk", "ttl",
}  # fmt: skip


def body_of(data: dict[str, Any] | None) -> bytes:
    """A message body from DynamoMQ's `data`: text and bytes as they are, anything else
    (DynamoMQ stores Go structs as maps) as JSON."""
    if data is None:
        return b""
    if "S" in data:
        return str(data["S"]).encode()
    if "B" in data:
        return bytes(data["B"])
    return json.dumps(_deserialize(data), default=_json_number, separators=(",", ":")).encode()


def _json_number(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, set):
        return sorted(value)
    if isinstance(value, bytes | bytearray):
        return value.decode("latin-1")
    raise TypeError(f"cannot show {type(value).__name__} as JSON")


def data_of(body: bytes, compressed: bool, as_map: bool) -> dict[str, Any]:
    """`data` for a body: text as S, other bytes as B; with `as_map` (DynamoMQ's queues), a
    JSON object as a map, as DynamoMQ's typed consumers read it."""
    if compressed:
        return {"B": body}
    try:
        decoded = body.decode()
    except UnicodeDecodeError:
        return {"B": body}
    if as_map and decoded.startswith("{"):
        try:
            value = json.loads(decoded, parse_float=Decimal)
            if isinstance(value, dict):
                return dict(_serialize(value))
        except (ValueError, TypeError):
            pass
    return {"S": decoded}


def doc_of(item: Item, entry: Entry) -> Doc:
    """A message item decoded; items DynamoMQ wrote (no Conveyor fields) too. On DynamoMQ's
    queues DynamoMQ's times rule (its consumers change them and nothing else): a message is
    invisible until `invisible_until_at`, or if that is empty, until `sent_at`."""
    kp = entry.kp
    entered = parse_time(text(item, "sent_at")) or 0.0
    vis = num(item, "vis")
    if entry.compat or vis is None:
        vis = parse_time(text(item, "invisible_until_at")) or entered
    seq = num(item, "seq")
    mid = text(item, "mid")
    attrs = text(item, "attrs")
    z = item.get("z")
    return Doc(
        mid=mid if mid is not None else item["id"]["S"][len(kp) :],
        qt=text(item, "queue_type") or "",
        body=body_of(item.get("data")),
        attributes=decode_attributes(attrs) if attrs else {},
        grp=text(item, "grp"),
        ddk=text(item, "ddk"),
        pri=int(num(item, "pri") or 0),
        seq=int(seq) if seq is not None else seq_of_time(entered),
        dl=num(item, "dl"),
        sat=num(item, "sat") or entered,
        vis=vis,
        rc=int(num(item, "receive_count") or 0),
        frx=num(item, "frx") if "frx" in item else parse_time(text(item, "received_at")),
        version=int(num(item, "version") or 1),
        tok=text(item, "tok"),
        src=text(item, "src"),
        err=text(item, "err"),
        z=bool(z and z.get("BOOL")),
        entered_at=entered,
        created=text(item, "created_at"),
        extra={k: v for k, v in item.items() if k not in KNOWN},
    )


def doc_item(doc: Doc, entry: Entry, now: float) -> Item:
    """The whole item for a message, placed in the sparse index its state belongs to."""
    item: Item = dict(doc.extra)
    now_text = rfc3339(now)
    item.update(
        {
            "id": s(entry.item_id(doc.mid)),
            "queue_type": s(entry.qt),
            "data": data_of(doc.body, doc.z, entry.compat),
            "receive_count": n(doc.rc),
            "version": n(doc.version),
            "created_at": s(doc.created or rfc3339(doc.sat)),
            "updated_at": s(now_text),
            "sent_at": s(rfc3339(doc.entered_at)),
            "received_at": s(rfc3339(doc.frx) if doc.frx is not None else ""),
            "invisible_until_at": s(rfc3339(doc.vis) if doc.vis > now else ""),
            "mid": s(doc.mid),
            "seq": n(doc.seq),
            "pri": n(doc.pri),
            "vis": n(doc.vis),
            "sat": n(doc.sat),
            "ttl": n(int(doc.sat + entry.attrs.retention) + 1),
        }
    )
    optional: dict[str, dict[str, Any] | None] = {
        "attrs": s(a) if (a := encode_attributes(doc.attributes)) else None,
        "grp": s(doc.grp) if doc.grp is not None else None,
        "ddk": s(doc.ddk) if doc.ddk is not None else None,
        "dl": n(doc.dl) if doc.dl is not None else None,
        "frx": n(doc.frx) if doc.frx is not None else None,
        "tok": s(doc.tok) if doc.tok is not None else None,
        "src": s(doc.src) if doc.src is not None else None,
        "err": s(doc.err) if doc.err is not None else None,
        "z": {"BOOL": True} if doc.z else None,
    }
    item.update({k: v for k, v in optional.items() if v is not None})
    if not entry.compat:
        if doc.vis <= now:
            item["rq"], item["rk"] = s(entry.qt), s(rank(doc.pri, doc.seq))
        else:
            item["fq"], item["fk"] = s(entry.qt), n(doc.vis)
    return item


def new_doc(entry: Entry, m: NewMessage, mid: str, seq: int, now: float) -> Doc:
    """A message sent `now` to `entry`'s queue as its doc, the `seq`th in send order."""
    shown, key = dedup(m, entry.attrs)
    return Doc(
        mid=mid,
        qt=entry.qt,
        body=m.body,
        attributes=dict(m.attributes),
        grp=m.group_id,
        ddk=shown,
        dkey=key,
        pri=0 if entry.attrs.fifo else m.priority,
        seq=seq,
        dl=m.deadline,
        sat=now,
        vis=now + m.delay,
        rc=0,
        frx=None,
        version=1,
        tok=None,
        src=None,
        err=None,
        z=m.compressed,
        entered_at=now,
    )


def put_actions(entry: Entry, doc: Doc, now: float) -> list[dict[str, Any]]:
    """The writes that store a new message: the message if its id is new, and on FIFO
    queues its de-duplication record if the key was not seen in the window."""
    actions: list[dict[str, Any]] = [
        {
            "Put": {
                "Item": doc_item(doc, entry, now),
                **expr(ConditionExpression="attribute_not_exists(#id)"),
            }
        }
    ]
    if doc.dkey is not None:
        actions.append(
            {
                "Put": {
                    "Item": {
                        "id": s(dedup_record_id(entry.qt, doc.dkey)),
                        "queue_type": s(f"{entry.qt}#dedup"),
                        "sent_at": s(doc.dkey),
                        "mid": s(doc.mid),
                        "exp": n(now + DEDUP_WINDOW),
                        "ttl": n(int(now + DEDUP_WINDOW) + 1),
                    },
                    "ExpressionAttributeValues": {":now": n(now)},
                    **expr(ConditionExpression="attribute_not_exists(#id) OR #exp <= :now"),
                }
            }
        )
    return actions


def dedup_record_id(qt: str, key: str) -> str:
    """The id of the item a FIFO queue keeps for a de-duplication key while its window
    lasts."""
    return f"conveyor#dedup#{qt}#{key}"


def queue_info(entry: Entry) -> QueueInfo:
    """A queue's registry entry as the store answers it."""
    return QueueInfo(
        name=entry.name,
        attributes=entry.attrs,
        created_at=entry.created_at,
        updated_at=entry.updated_at,
    )


# -- consumers --------------------------------------------------------------------------------


def consumer_item(c: Consumer) -> Item:
    return {
        "id": s(f"conveyor#consumer#{c.id}"),
        "queue_type": s(CONSUMERS),
        "sent_at": s(f"{c.registered_at:020.6f}#{c.id}"),
        "c": s(json.dumps(c.to_dict())),
        "ttl": n(int(c.heartbeat_at + c.timeout) + 1),
    }


def consumer_of(item: Item) -> Consumer:
    data = json.loads(item["c"]["S"])
    return Consumer(
        id=data["id"],
        queue=data["queue"],
        info=data["info"],
        timeout=float(data["timeout"]),
        registered_at=float(data["registered_at"]),
        heartbeat_at=float(data["heartbeat_at"]),
    )
