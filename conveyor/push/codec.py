"""SKMQ's wire format, sans I/O: bytes in, frames out, and frames back to bytes.

A frame is `key=value` lines, each ended by CRLF, and then an empty line. The keys are
`type`, `appid`, `msgid` and `content`; the key is what comes before the first `=`, and
`content` is raw bytes. A bare `ping` or `pong` line is a heartbeat frame. Empty lines
between frames are skipped (SKMQ's broker ends its replies with two empty lines).

SKMQ's `content` cannot hold a CRLF. This codec adds one key, `length=N`, written before
`content` only when the content needs it: the next `content=` value is then exactly N bytes
followed by CRLF, whatever they are. A frame without CRLF in its content encodes exactly as
SKMQ encodes it, and SKMQ's peers ignore `length` as an unknown key.

The decoder never raises on input: a malformed frame (a line without `=`, a frame without a
type, a line or frame over the limits, a bad length) comes out as a `FrameError`, and decoding
goes on with the next frame.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field

CRLF = b"\r\n"
MAX_LINE = 8 * 1024  # bytes in a line other than content
MAX_FRAME = 1024 * 1024  # bytes in a whole frame, content included
KEYS = ("type", "appid", "msgid")
_PLAIN = (b"type", b"appid", b"msgid")
# an HTTP request's first line: what a browser sends when a page elsewhere posts a form here
HTTP_REQUEST = re.compile(rb"[A-Z]{3,10} \S+ HTTP/[0-9.]{1,5}")


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame. `extra` holds keys this codec does not know (kept, never interpreted)."""

    type: str
    appid: str = ""
    msgid: str = ""
    content: bytes = b""
    extra: tuple[tuple[str, str], ...] = field(default=())


@dataclass(frozen=True, slots=True)
class FrameError:
    """Input that is not a frame, and why: the peer gets a `resp` error and goes on. `http`:
    it began as an HTTP request does (a browser's, sent for another site's page, whose
    body could hold frames): the connection is to be closed, nothing after it read."""

    reason: str
    http: bool = False


PING = Frame(type="ping")
PONG = Frame(type="pong")


def encode(frame: Frame) -> bytes:
    """A frame as SKMQ writes it: type, appid and msgid when set, then content (always),
    then the empty line; `length=N` first where the content holds a CR or LF."""
    if frame.type in ("ping", "pong") and not (frame.appid or frame.msgid or frame.content):
        return frame.type.encode() + CRLF + CRLF
    for name, value in (("type", frame.type), ("appid", frame.appid), ("msgid", frame.msgid)):
        if "\r" in value or "\n" in value:
            raise ValueError(f"frame {name} must not contain CR or LF: {value!r}")
    parts = [b"type=", frame.type.encode(), CRLF]
    if frame.appid:
        parts += [b"appid=", frame.appid.encode(), CRLF]
    if frame.msgid:
        parts += [b"msgid=", frame.msgid.encode(), CRLF]
    for key, value in frame.extra:
        parts += [key.encode(), b"=", value.encode(), CRLF]
    content = frame.content
    if b"\r" in content or b"\n" in content:
        parts += [b"length=", str(len(content)).encode(), CRLF]
    parts += [b"content=", content, CRLF, CRLF]
    return b"".join(parts)


def encode_push(appid: str, msgid: str, content: bytes) -> bytes:
    """`encode(Frame(type="push", ...))` for what the gateway pushes: an app name and a
    message id (neither holds CR or LF) and a body."""
    if not appid or not msgid or b"\r" in content or b"\n" in content:
        return encode(Frame(type="push", appid=appid, msgid=msgid, content=content))
    return b"".join(
        (b"type=push\r\nappid=", appid.encode(), b"\r\nmsgid=", msgid.encode(), b"\r\ncontent=",
         content, b"\r\n\r\n")
    )  # fmt: skip


SEND_TYPES = ("queue", "topic")
ANSWERS = ("arrived", "ack", "reject", "error")


def resp(status: str, text: str, *, msgid: str = "") -> bytes:
    """A `resp` frame: JSON content with the status (ack, reject or error) and a text."""
    content = json.dumps({"status": status, "content": text}, ensure_ascii=False)
    return encode(Frame(type="resp", msgid=msgid, content=content.encode()))


def _ack_as(text: str) -> Callable[[str], bytes]:
    """`resp("ack", text, msgid=...)` for a fixed text, made by joining bytes (the answers to
    every send and every acknowledgement)."""
    with_id = resp("ack", text, msgid="\0").split(b"\0")
    without = resp("ack", text)
    head, tail = with_id[0], with_id[1]

    def made(msgid: str) -> bytes:
        return b"".join((head, msgid.encode(), tail)) if msgid else without

    return made


ACK_ANSWER = _ack_as("")
ACK_SENT = _ack_as("Message enqueue successful")


class Decoder:
    """Feed it bytes as they arrive; it returns the frames (and errors) they complete."""

    def __init__(self, *, max_line: int = MAX_LINE, max_frame: int = MAX_FRAME) -> None:
        self.max_line = max_line
        self.max_frame = max_frame
        self._buf = bytearray()
        self._fields: dict[str, str] = {}
        self._extra: list[tuple[str, str]] = []
        self._content: bytes | None = None
        self._length: int | None = None  # reading a content of this many bytes
        self._announced: int | None = None  # length= read; `content=` must follow
        self._size = 0
        self._bare = False  # the frame is a bare `ping` or `pong` line
        self._error: str | None = None  # the frame is bad: skip to its end
        self._http = False  # the frame began as an HTTP request does

    @property
    def pending(self) -> bool:
        """Whether part of a frame has arrived and its end has not."""
        return bool(
            self._buf or self._fields or self._extra or self._content is not None
            or self._length is not None or self._announced is not None or self._error
        )  # fmt: skip

    def feed(self, data: bytes) -> list[Frame | FrameError]:
        self._buf += data
        out: list[Frame | FrameError] = []
        while True:
            if self._clean() and self._whole_frames(out) and len(self._buf) <= self.max_frame:
                return out  # no whole frame left: wait for more
            if not self._lines(out):
                return out

    def _clean(self) -> bool:
        """Whether no frame is under way (the last one read has ended)."""
        return not (
            self._fields or self._extra or self._content is not None or self._error
            or self._length is not None or self._announced is not None or self._bare
        )  # fmt: skip

    def _lines(self, out: list[Frame | FrameError]) -> bool:
        """Read a line at a time, with every check, until a frame (or an empty line between
        frames) ends: True then, False when the input runs out first."""
        while True:
            if self._announced is not None:
                if len(self._buf) < 8:
                    return False
                if self._buf.startswith(b"content="):
                    del self._buf[:8]
                    self._size += 8
                    self._length = self._announced
                else:
                    self._fail("length= must come right before content=")
                self._announced = None
                continue
            if self._length is not None:  # a content of known length
                need = self._length + 2
                if len(self._buf) < need:
                    if self._size + len(self._buf) > self.max_frame:
                        self._fail(f"frame over {self.max_frame} bytes")
                        self._length = None
                        continue
                    return False
                value = bytes(self._buf[: self._length])
                fits = self._buf[self._length : need] == CRLF
                taken = need if fits else self._length  # else the rest is read as lines
                del self._buf[:taken]
                self._size += taken
                self._length = None
                if fits:
                    self._content = value
                else:
                    self._fail("content longer than its length= says")
                continue
            end = self._buf.find(CRLF)
            if end < 0:
                if len(self._buf) > self.max_frame:
                    self._buf.clear()
                    self._fail(f"line over {self.max_frame} bytes")
                return False
            line = bytes(self._buf[:end])
            del self._buf[: end + 2]
            self._size += end + 2
            if not line:
                done = self._finish()
                if done is not None:
                    out.append(done)
                return True
            if self._error is None:
                self._line(line)
            if self._size > self.max_frame and self._error is None:
                self._fail(f"frame over {self.max_frame} bytes")

    def _whole_frames(self, out: list[Frame | FrameError]) -> bool:
        """The fast way through the frames that are whole in the buffer and plain (type,
        appid, msgid and content lines, UTF-8 where it must be, within the limits): a frame
        at a time instead of a line at a time. It stops at the first other frame, which the
        line-by-line way then reads with every check (False), or where no whole frame is
        left (True)."""
        buf = self._buf
        pos = 0
        while True:
            while buf.startswith(CRLF, pos):  # empty lines between frames
                pos += 2
            end = buf.find(b"\r\n\r\n", pos)
            if end < 0:
                whole = True
                break
            if end - pos > self.max_frame:
                whole = False
                break
            fields: dict[bytes, bytes] = {}
            content: bytes | None = None
            plain = True
            for line in bytes(buf[pos:end]).split(CRLF):
                key, eq, value = line.partition(b"=")
                if not eq:
                    plain = False
                    break
                if key == b"content" and content is None:
                    content = value
                elif (
                    key in _PLAIN
                    and key not in fields
                    and len(line) <= self.max_line
                    and b"\r" not in line
                    and b"\n" not in line
                ):
                    fields[key] = value
                else:  # no `=`, length=, another key, a key twice, a long line, a CR or LF
                    plain = False
                    break
            whole = False
            if not plain or not fields.get(b"type"):
                break
            try:
                frame = Frame(
                    type=fields[b"type"].decode(),
                    appid=fields[b"appid"].decode() if b"appid" in fields else "",
                    msgid=fields[b"msgid"].decode() if b"msgid" in fields else "",
                    content=content or b"",
                )
            except UnicodeDecodeError:
                break
            out.append(frame)
            pos = end + 4
        if pos:
            del buf[:pos]
        return whole

    def _line(self, line: bytes) -> None:
        if (
            not self._fields
            and not self._extra
            and self._content is None
            and self._error is None
            and HTTP_REQUEST.fullmatch(line)
        ):
            self._http = True
            self._fail(f"{line[:60].decode('latin-1')!r} is an HTTP request, not a frame")
            return
        key, eq, value = line.partition(b"=")
        if not eq:
            word = line.strip().decode("latin-1")
            if word in ("ping", "pong") and not self._fields and self._content is None:
                self._fields["type"] = word
                self._bare = True
                return
            self._fail(f"line {word[:40]!r} is not key=value")
            return
        if key == b"content":
            if self._content is not None:
                self._fail("content given twice")
                return
            self._content = value
            return
        if len(line) > self.max_line:
            self._fail(f"line over {self.max_line} bytes")
            return
        try:
            name, text = key.decode(), value.decode()
        except UnicodeDecodeError:
            self._fail("keys and values other than content must be UTF-8")
            return
        if b"\r" in line or b"\n" in line:
            # a line ends at CRLF: a lone CR or LF is not a line break, and no key but
            # content may hold one (it would break the frames written back with it)
            self._fail(f"{name[:40]!r}: a line other than content must not hold a CR or LF")
            return
        if name == "length":
            if not text.isdigit() or int(text) > self.max_frame:
                self._fail(f"length={text[:20]!r} is not a size up to {self.max_frame}")
                return
            if self._content is not None:
                self._fail("length= must come before content=")
                return
            self._announced = int(text)
            return
        if name in KEYS:
            self._fields[name] = text
        else:
            self._extra.append((name, text))

    def _fail(self, reason: str) -> None:
        if self._error is None:
            self._error = reason

    def _finish(self) -> Frame | FrameError | None:
        fields, extra, content, error = self._fields, self._extra, self._content, self._error
        bare, self._bare = self._bare, False
        http, self._http = self._http, False
        self._fields, self._extra, self._content, self._error = {}, [], None, None
        self._size = 0
        if error is not None:
            return FrameError(error, http)
        if not fields and not extra and content is None:
            return None  # an empty line between frames
        kind = fields.get("type", "")
        if not kind:
            return FrameError("frame has no type= line")
        if bare:
            return PING if kind == "ping" else PONG
        return Frame(
            type=kind,
            appid=fields.get("appid", ""),
            msgid=fields.get("msgid", ""),
            content=content or b"",
            extra=tuple(extra),
        )
