"""Python clients of the push gateway: `PushProducer` sends, `PushConsumer` gets pushes.

Both speak SKMQ's frames over one TCP connection (`skmq://host:port`, default port 1734)
and reconnect when it drops.
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import socket
import ssl
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ..exceptions import InvalidInput, PushRefused
from .codec import PING, PONG, Decoder, Frame, FrameError, encode
from .config import DEFAULT_PORT

log = logging.getLogger("conveyor.push")

ACK_PREFIX = b'{"status": "ack"'  # how the gateway's `resp` ack starts
# seconds: answers of a batch still being handled are sent this often, and a message that
# waited this long for the handler is answered `arrived` before it is handled
ANSWER_EVERY = 0.05
# seconds: a consumer whose handler runs this long without anything written pings the
# gateway, whose own pings wait unread until the handler returns
KEEP_ALIVE = 0.25


class Reject(Exception):
    """Raise from a handler: the message is delivered again (up to the gateway's
    `retry_times`, then dead-lettered)."""


class DeadLetter(Exception):
    """Raise from a handler: the message goes to the dead-letter queue now (`error`)."""


@dataclass(frozen=True)
class PushMessage:
    appid: str
    msgid: str
    content: bytes

    def text(self) -> str:
        return self.content.decode()

    def json(self) -> Any:
        return json.loads(self.content)


def parse_url(url: str) -> tuple[str, int, str | None, bool]:
    """`skmq://host:port?token=T` (`skmqs://` over TLS; or `tcp://`, or `host:port`) ->
    host, port, token, TLS."""
    if "://" not in url:
        url = "skmq://" + url
    parts = urlsplit(url)
    if parts.scheme not in ("skmq", "skmqs", "tcp") or not parts.hostname:
        raise InvalidInput(f"push gateway URL {url!r}: give skmq://HOST:PORT (skmqs:// for TLS)")
    tokens = parse_qs(parts.query).get("token")
    port = parts.port or DEFAULT_PORT
    return parts.hostname, port, tokens[0] if tokens else None, parts.scheme == "skmqs"


def connect(host: str, port: int, timeout: float, tls: ssl.SSLContext | None) -> socket.socket:
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if tls is None:
        return sock
    try:
        return tls.wrap_socket(sock, server_hostname=host)
    except BaseException:
        sock.close()
        raise


@dataclass(frozen=True)
class PushReply:
    """The gateway's answer to one send: `status` ack (stored), reject or error."""

    status: str
    text: str

    @property
    def ok(self) -> bool:
        return self.status == "ack"


def resp_of(frame: Frame) -> tuple[str, str]:
    try:
        data = json.loads(frame.content)
        return str(data.get("status", "")), str(data.get("content", ""))
    except (ValueError, AttributeError):
        return "error", frame.content.decode("utf-8", "replace")


class PushProducer:
    """Sends messages to the gateway, one at a time, each confirmed by its `resp`.

    ``with PushProducer("skmq://127.0.0.1:1734") as producer: producer.send("billing",
    b"...", msgid="inv-1")`` (it keeps one connection open until `close`). Thread-safe
    (sends are serialized). A send whose connection drops is sent again once on a new
    connection; give a `msgid` to have the gateway drop the repeat.
    """

    def __init__(self, url: str = f"skmq://127.0.0.1:{DEFAULT_PORT}", *,
                 token: str | None = None, timeout: float = 30.0,
                 ssl_context: ssl.SSLContext | None = None) -> None:  # fmt: skip
        self.host, self.port, url_token, tls = parse_url(url)
        self.tls = (ssl_context or ssl.create_default_context()) if tls else None
        self.token = token or url_token
        self.timeout = timeout
        self._sock: socket.socket | None = None
        self._decoder = Decoder()
        self._frames: deque[Frame] = deque()
        self._lock = threading.Lock()

    def send(
        self, appid: str, content: bytes | str, msgid: str | None = None, type: str = "queue"
    ) -> str:
        """Send one message (`type` "queue": to one consumer; "topic": to each) and return
        the gateway's answer; PushRefused if it rejects it."""
        if type not in ("queue", "topic"):
            raise InvalidInput(f'type must be "queue" or "topic", not {type!r}')
        body = content.encode() if isinstance(content, str) else content
        frame = encode(Frame(type=type, appid=appid, msgid=msgid or "", content=body))
        with self._lock:
            for attempt in (1, 2):
                try:
                    status, text = self._request(frame)
                    break
                except OSError:
                    self._reset()
                    if attempt == 2:
                        raise
        if status != "ack":
            raise PushRefused(status, text)
        return text

    def send_many(
        self,
        appid: str,
        contents: Iterable[bytes | str],
        *,
        msgids: Iterable[str | None] | None = None,
        type: str = "queue",
        window: int = 100,
    ) -> list[PushReply]:
        """Send messages one frame each without waiting for each answer: up to `window`
        are unanswered at a time (as RabbitMQ's streaming publisher confirms). Returns each
        message's reply in order; a dropped connection raises (the replies not read are
        unknown: send again with msgids to have repeats dropped)."""
        if type not in ("queue", "topic"):
            raise InvalidInput(f'type must be "queue" or "topic", not {type!r}')
        if window < 1:
            raise InvalidInput("window must be at least 1")
        ids = iter(msgids) if msgids is not None else None
        bodies = iter(contents)
        replies: list[PushReply] = []
        with self._lock:
            try:
                sock = self._connect()
                sent, more = 0, True
                while True:
                    # as many frames as the window has room for, in one write
                    chunk: list[bytes] = []
                    while more and sent + len(chunk) - len(replies) < window:
                        content = next(bodies, None)
                        if content is None:
                            more = False
                            break
                        body = content.encode() if isinstance(content, str) else content
                        msgid = (next(ids, None) if ids is not None else None) or ""
                        chunk.append(
                            encode(Frame(type=type, appid=appid, msgid=msgid, content=body))
                        )
                    if chunk:
                        sock.sendall(b"".join(chunk))
                        sent += len(chunk)
                    if len(replies) == sent and not more:
                        return replies
                    # one reply at least, and every other one already read
                    replies.append(PushReply(*resp_of(self._next())))
                    while self._frames:
                        frame = self._frames.popleft()
                        if frame.type == "resp":
                            replies.append(PushReply(*resp_of(frame)))
            except OSError:
                self._reset()
                raise

    def _request(self, data: bytes) -> tuple[str, str]:
        sock = self._connect()
        sock.sendall(data)
        return resp_of(self._next())

    def _connect(self) -> socket.socket:
        if self._sock is None:
            sock = connect(self.host, self.port, self.timeout, self.tls)
            self._sock, self._decoder, self._frames = sock, Decoder(), deque()
            if self.token is not None:
                sock.sendall(encode(Frame(type="auth", content=self.token.encode())))
                status, text = resp_of(self._next())
                if status != "ack":
                    self._reset()
                    raise PushRefused(status, text)
        return self._sock

    def _next(self) -> Frame:
        assert self._sock is not None
        while True:
            while self._frames:
                frame = self._frames.popleft()
                if frame.type == "resp":
                    return frame
            data = self._sock.recv(65536)
            if not data:
                raise ConnectionResetError("the gateway closed the connection")
            for item in self._decoder.feed(data):
                if isinstance(item, Frame):
                    self._frames.append(item)

    def _reset(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
        self._sock = None

    def close(self) -> None:
        with self._lock:
            self._reset()

    def __enter__(self) -> PushProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


Handler = Callable[[PushMessage], Any]


class PushConsumer:
    """Registers with the gateway and runs `handler` on each message pushed to it.

    The handler's outcome is the answer: returning (anything but False) acknowledges the
    message; returning False or raising `Reject` rejects it (delivered again, up to the
    gateway's `retry_times`); raising `DeadLetter` sends it to the dead-letter queue; any
    other exception rejects it and is logged. A message that waits for the handler 50 ms or
    more is answered `arrived` first.

    With one worker (the default) the handler runs on the thread that reads the
    connection, as a message comes in, without a hand-off to another thread; while it runs
    long, a keeper thread pings the gateway every `KEEP_ALIVE` seconds (any frame is a sign
    of life to it), as the gateway's own pings wait unread until the handler returns. With
    more workers, each message goes to a pool of that many threads.

    `run()` blocks until `stop()` (or SIGTERM/SIGINT, when run in the main thread): the
    handlers in progress finish and are answered, the connection closes, and messages
    pushed but not started go back to the queue. A dropped connection is re-established
    and the consumer registered again.
    """

    def __init__(
        self,
        url: str,
        appid: str,
        handler: Handler,
        *,
        weight: int = 1,
        consumer_id: str | None = None,
        prefetch: int = 16,
        workers: int = 1,
        token: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.host, self.port, url_token, tls = parse_url(url)
        self.tls = (ssl_context or ssl.create_default_context()) if tls else None
        self.token = token or url_token
        self.appid = appid
        self.handler = handler
        self.weight = weight
        self.id = consumer_id or f"{socket.gethostname()}-{uuid.uuid4().hex[:12]}"
        self.prefetch = prefetch
        self.workers = workers
        self.registered = threading.Event()
        self._stopping = threading.Event()
        self._sock: socket.socket | None = None
        self._write_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._in_hand = False  # a handler runs on the reading thread
        self._written_at = time.monotonic()  # when this consumer last wrote to the gateway

    # -- running --------------------------------------------------------------------------

    def start(self) -> PushConsumer:
        """Run in a background thread; returns once registered (or raises its error)."""
        self._thread = threading.Thread(target=self.run, name=f"push {self.id}", daemon=True)
        self._thread.start()
        while not self.registered.wait(0.05):
            if not self._thread.is_alive():
                raise ConnectionError(f"consumer {self.id} could not register")
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Finish the handlers in progress, answer them and disconnect."""
        self._stopping.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def run(self) -> None:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: self._stopping.set())
        pool = ThreadPoolExecutor(self.workers, thread_name_prefix=f"push-{self.id}")
        if self.workers == 1:
            pool.submit(self._keep_alive)
        backoff = 0.1
        try:
            while not self._stopping.is_set():
                try:
                    self._session(pool)
                    backoff = 0.1
                except PushRefused:
                    raise
                except OSError as exc:
                    self.registered.clear()
                    if self._stopping.is_set():
                        break
                    log.warning("push consumer %s: %s; reconnecting in %.1f s",
                                self.id, exc, backoff)  # fmt: skip
                    self._stopping.wait(backoff)
                    backoff = min(5.0, backoff * 2)
        finally:
            self._stopping.set()  # the keeper, too, stops
            pool.shutdown(wait=True)  # handlers in progress finish and answer
            self._close()

    def _session(self, pool: ThreadPoolExecutor) -> None:
        sock = connect(self.host, self.port, 10, self.tls)
        sock.settimeout(0.5)  # to notice stop()
        self._sock = sock
        register = {
            "id": self.id,
            "app_id": self.appid,
            "host": "",
            "port": "",
            "weight": self.weight,
            "prefetch": self.prefetch,
        }
        if self.token is not None:
            register["token"] = self.token
        self._write(encode(Frame(type="register", content=json.dumps(register).encode())))
        decoder = Decoder()
        while not self._stopping.is_set():
            try:
                data = sock.recv(65536)
            except TimeoutError:
                continue
            if not data:
                raise ConnectionResetError("the gateway closed the connection")
            # what one read brings goes to the handlers at once, and is answered together
            out: list[bytes] = []
            pushed: list[PushMessage] = []
            for item in decoder.feed(data):
                if isinstance(item, FrameError):
                    log.warning("push consumer %s: bad frame from the gateway: %s",
                                self.id, item.reason)  # fmt: skip
                elif item.type == "ping":
                    out.append(encode(PONG))
                elif item.type == "push":
                    if self._stopping.is_set():
                        continue  # released by the gateway when we disconnect
                    pushed.append(PushMessage(item.appid or self.appid, item.msgid, item.content))
                elif item.type == "resp":
                    self._on_resp(item)
            if out:
                self._write(b"".join(out))
            if not pushed:
                continue
            now = time.monotonic()
            if self.workers == 1:  # here: a thread hand-off costs more than a small handler
                self._handle_all(pushed, sock, now)
            else:
                for message in pushed:
                    pool.submit(self._handle_all, [message], sock, now)

    def _on_resp(self, frame: Frame) -> None:
        if frame.content.startswith(ACK_PREFIX) and self.registered.is_set():
            return  # an answer taken: nothing to do
        status, text = resp_of(frame)
        if text == "Recipient register successful.":
            self.registered.set()
            log.info("push consumer %s registered on app %s", self.id, self.appid)
        elif status != "ack":
            if not self.registered.is_set():
                self._stopping.set()
                raise PushRefused(status, text)
            log.warning("push consumer %s: gateway answered %s: %s", self.id, status, text)

    def _handle_all(
        self, messages: list[PushMessage], sock: socket.socket, received_at: float
    ) -> None:
        """Run the handler on each message and answer them: together, unless handling
        takes long (then what is done is answered every ANSWER_EVERY seconds). Messages
        that wait ANSWER_EVERY or more for the handler are answered `arrived` as it comes
        to them (a message handled at once needs no word before its answer)."""
        answers: list[bytes] = []
        since = time.monotonic()
        announced = 0  # messages[:announced] were answered `arrived`
        for i, message in enumerate(messages):
            if self._stopping.is_set():
                break  # not started: released by the gateway when we disconnect
            if i >= announced and time.monotonic() - received_at >= ANSWER_EVERY:
                answers += [self._frame("arrived", m.msgid) for m in messages[i:]]
                announced = len(messages)
                self._answer_all(answers, sock)
                answers, since = [], time.monotonic()
            self._in_hand = True
            try:
                outcome = self._outcome(message)
            finally:
                self._in_hand = False
            answers.append(self._frame(outcome, message.msgid))
            if time.monotonic() - since >= ANSWER_EVERY:
                self._answer_all(answers, sock)
                answers, since = [], time.monotonic()
        self._answer_all(answers, sock)

    def _keep_alive(self) -> None:
        """While a handler runs on the reading thread, ping the gateway whenever the
        consumer has written nothing for `KEEP_ALIVE` seconds (its `pong` is read, and
        ignored, once the handler returns)."""
        while not self._stopping.wait(KEEP_ALIVE / 2):
            sock = self._sock
            quiet = time.monotonic() - self._written_at >= KEEP_ALIVE
            if self._in_hand and quiet and sock is not None:
                self._answer_all([encode(PING)], sock)

    def _outcome(self, message: PushMessage) -> str:
        try:
            outcome = self.handler(message)
            return "reject" if outcome is False else "ack"
        except Reject:
            return "reject"
        except DeadLetter:
            return "error"
        except Exception:
            log.exception("push consumer %s: handler failed on %s", self.id, message.msgid)
            return "reject"

    def _answer_all(self, answers: list[bytes], sock: socket.socket) -> None:
        if answers and sock is self._sock:
            with contextlib.suppress(OSError):
                self._write(b"".join(answers))

    def _frame(self, kind: str, msgid: str) -> bytes:
        return encode(Frame(type=kind, appid=self.appid, msgid=msgid))

    def _write(self, data: bytes) -> None:
        sock = self._sock
        if sock is None:
            raise ConnectionResetError("not connected")
        with self._write_lock:
            sock.sendall(data)
            self._written_at = time.monotonic()

    def _close(self) -> None:
        sock, self._sock = self._sock, None
        self.registered.clear()
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def __enter__(self) -> PushConsumer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
