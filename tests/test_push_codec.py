"""SKMQ's wire format: the seed's frames byte for byte, content with CRLF, malformed input,
and a fuzz of the decoder (no exception escapes; encode then decode gives the frame back)."""

from __future__ import annotations

import json

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from conveyor.push.codec import PING, PONG, Decoder, Frame, FrameError, encode, encode_push


def decode_all(data: bytes, chunk: int = 0) -> list[Frame | FrameError]:
    d = Decoder()
    if chunk <= 0:
        return d.feed(data)
    out: list[Frame | FrameError] = []
    for i in range(0, len(data), chunk):
        out += d.feed(data[i : i + chunk])
    return out


def test_the_seeds_frames_byte_for_byte() -> None:
    # delivery, as the seed shows it: MQ -> consumer
    push = b"msgid=id_xxx\r\ntype=push\r\ncontent=bytes_xxx\r\n\r\n"
    assert decode_all(push) == [Frame(type="push", msgid="id_xxx", content=b"bytes_xxx")]
    assert decode_all(b"msgid=id_xxx\r\ntype=ack\r\n\r\n") == [Frame(type="ack", msgid="id_xxx")]
    assert decode_all(b"ping\r\n\r\n") == [PING]
    assert encode(PONG) == b"pong\r\n\r\n"
    assert encode(PING) == b"ping\r\n\r\n"
    # SKMQ's encoder: type, appid and msgid when set, content always
    sent = Frame(type="queue", appid="app-1", msgid="m-1", content=b"hello")
    assert encode(sent) == b"type=queue\r\nappid=app-1\r\nmsgid=m-1\r\ncontent=hello\r\n\r\n"
    topic = encode(Frame(type="topic", appid="app-1"))
    assert topic == b"type=topic\r\nappid=app-1\r\ncontent=\r\n\r\n"
    for kind in ("arrived", "ack", "reject", "error"):
        assert encode(Frame(type=kind, msgid="m-1")) == (
            f"type={kind}\r\nmsgid=m-1\r\ncontent=\r\n\r\n".encode()
        )
    register = json.dumps(
        {"id": "r1", "app_id": "app-1", "host": "127.0.0.1", "port": "8001", "weight": 2}
    ).encode()
    [frame] = decode_all(b"type=register\r\ncontent=" + register + b"\r\n\r\n")
    assert isinstance(frame, Frame) and json.loads(frame.content)["weight"] == 2
    # the broker's replies end with two empty lines (SendMessage adds a terminator)
    resp = b'type=resp\r\ncontent={"status":"ack","content":"Message enqueue successful"}'
    assert decode_all(resp + b"\r\n\r\n\r\n\r\n" + b"ping\r\n\r\n") == [
        Frame(type="resp", content=b'{"status":"ack","content":"Message enqueue successful"}'),
        PING,
    ]


def test_content_with_crlf_travels_with_a_length() -> None:
    frame = Frame(type="queue", appid="a", msgid="m", content=b"line 1\r\n\r\nline 2\n")
    wire = encode(frame)
    assert b"length=17\r\ncontent=line 1\r\n\r\nline 2\n\r\n\r\n" in wire
    assert decode_all(wire) == [frame]
    assert decode_all(wire, chunk=1) == [frame]
    # content without CR or LF is written as SKMQ writes it: no length key
    assert b"length=" not in encode(Frame(type="queue", content=b"plain"))


def test_malformed_frames_are_errors_and_decoding_goes_on() -> None:
    good = encode(Frame(type="queue", appid="a", content=b"ok"))
    out = decode_all(b"garbage line\r\n\r\n" + good)
    assert isinstance(out[0], FrameError) and "not key=value" in out[0].reason
    assert out[1:] == [Frame(type="queue", appid="a", content=b"ok")]
    [no_type] = decode_all(b"appid=a\r\ncontent=x\r\n\r\n")
    assert isinstance(no_type, FrameError) and "no type" in no_type.reason
    [bad_length] = decode_all(b"type=queue\r\nlength=abc\r\ncontent=x\r\n\r\n")
    assert isinstance(bad_length, FrameError)
    [short] = decode_all(b"type=queue\r\nlength=2\r\ncontent=xyz\r\n\r\n")
    assert isinstance(short, FrameError)
    # a lone LF or CR is not a line break: outside content it is refused (an id holding one
    # could not be written back in a reply)
    for data in (
        b"type=queue\r\nmsgid=0\n\nping\r\ncontent=x\r\n\r\n",
        b"type=ack\nmsgid=m\r\n\r\n",
        b"type=queue\r\nappid=a\rb\r\ncontent=x\r\n\r\n",
        b"type=queue\r\nother=a\nb\r\ncontent=x\r\n\r\n",
    ):
        for chunk in (0, 1, 7):
            [lone] = decode_all(data, chunk)
            assert isinstance(lone, FrameError) and "CR or LF" in lone.reason, (data, lone)
    [kept] = decode_all(b"type=queue\r\ncontent=a\nb\rc\r\n\r\n")  # content holds them
    assert kept == Frame(type="queue", content=b"a\nb\rc")


def test_an_http_request_is_an_error_of_its_own() -> None:
    """An HTTP request's first line (a browser posting a form here for another site's page)
    makes the frame an error marked `http`, however it is cut, whatever its target; other
    malformed frames, and a key or content that merely holds such words, are not marked."""
    body = b"type=queue\r\nappid=a\r\ncontent=x\r\n\r\n"
    for target in (b"/", b"/?a=b", b"http://127.0.0.1:1734/x"):
        request = b"POST " + target + b" HTTP/1.1\r\nHost: h\r\nCookie: a=b\r\n\r\n" + body
        for chunk in (0, 1, 5):
            out = decode_all(request, chunk)
            assert isinstance(out[0], FrameError) and out[0].http, (target, chunk, out)
            assert "HTTP request" in out[0].reason
    [plain] = decode_all(b"garbage line\r\n\r\n")
    assert isinstance(plain, FrameError) and not plain.http
    [kept] = decode_all(b"type=queue\r\ncontent=POST / HTTP/1.1\r\n\r\n")
    assert kept == Frame(type="queue", content=b"POST / HTTP/1.1")
    [later] = decode_all(b"type=queue\r\nGET / HTTP/1.1\r\n\r\n")  # not the first line
    assert isinstance(later, FrameError) and not later.http


def test_frames_and_lines_over_the_limits_are_refused() -> None:
    d = Decoder(max_line=64, max_frame=1024)
    out = d.feed(b"type=queue\r\nappid=" + b"a" * 100 + b"\r\ncontent=x\r\n\r\n")
    assert isinstance(out[0], FrameError) and "line over 64" in out[0].reason
    out = d.feed(b"type=queue\r\ncontent=" + b"x" * 2000 + b"\r\n\r\n")
    assert isinstance(out[0], FrameError) and "over 1024" in out[0].reason
    out = d.feed(b"type=queue\r\nlength=5000\r\ncontent=x\r\n\r\n")
    assert isinstance(out[0], FrameError)
    assert d.feed(encode(Frame(type="ack", msgid="m"))) == [Frame(type="ack", msgid="m")]


text = st.text(
    alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\r\n"),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(
    kind=text.filter(lambda t: t not in ("", "ping", "pong")),
    appid=text,
    msgid=text,
    content=st.binary(max_size=300),
    chunk=st.integers(min_value=0, max_value=50),
)
def test_encode_then_decode_gives_the_frame_back(
    kind: str, appid: str, msgid: str, content: bytes, chunk: int
) -> None:
    frame = Frame(type=kind, appid=appid, msgid=msgid, content=content)
    assert decode_all(encode(frame) * 2, chunk) == [frame, frame]


@settings(max_examples=500, deadline=None)
@given(data=st.binary(max_size=600), chunk=st.integers(min_value=0, max_value=64))
def test_no_input_makes_the_decoder_raise(data: bytes, chunk: int) -> None:
    out = decode_all(data, chunk)
    assert all(isinstance(f, Frame | FrameError) for f in out)
    # and, unless a length= announced content still to come, it decodes a good frame after
    # whatever came before
    assume(b"length=" not in data)
    d = Decoder()
    d.feed(data)
    tail = d.feed(b"\r\n\r\n" + encode(Frame(type="ack", msgid="m")))
    assert tail[-1] == Frame(type="ack", msgid="m")


class LineDecoder(Decoder):
    """The decoder without its fast way through whole plain frames: every line checked."""

    def _whole_frames(self, out: list[Frame | FrameError]) -> bool:
        return False


frames = st.builds(
    Frame,
    type=st.sampled_from(["queue", "push", "ack", "resp", "ping"]) | text,
    appid=st.sampled_from(["", "billing"]) | text,
    msgid=st.sampled_from(["", "m-1"]) | text,
    content=st.binary(max_size=40) | st.sampled_from([b"", b"a=b", b"\r\n\r\n", b"\xff"]),
)
noise = st.sampled_from(
    [b"", b"\r\n", b"ping\r\n\r\n", b"junk\r\n\r\n", b"type=x\r\ntype=y\r\n\r\n",
     b"type=a\r\nlength=2\r\ncontent=\r\n\r\n\r\n", b"msgid=\xff\r\ntype=q\r\n\r\n",
     b"type=q\r\nother=1\r\ncontent=x\r\n\r\n", b"appid\r\ntype=q\r\ncontent=x\r\n\r\n",
     b"type=q\r\n" + b"msgid=" + b"m" * 9000 + b"\r\n\r\n"]
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    parts=st.lists(st.one_of(frames.map(encode), noise), max_size=12),
    chunk=st.integers(min_value=0, max_value=64),
)
def test_the_fast_way_decodes_as_the_line_by_line_way(parts: list[bytes], chunk: int) -> None:
    """Whole plain frames are read a frame at a time; anything else line by line, with every
    check: both ways give the same frames and errors, however the input is cut."""
    data = b"".join(parts)
    fast, lines = Decoder(), LineDecoder()
    step = chunk or len(data) or 1
    got: list[Frame | FrameError] = []
    want: list[Frame | FrameError] = []
    for i in range(0, len(data), step):
        got += fast.feed(data[i : i + step])
        want += lines.feed(data[i : i + step])
    assert got == want
    assert fast.pending == lines.pending


@given(appid=text, msgid=text, content=st.binary(max_size=60) | st.just(b"a\r\nb"))
def test_a_push_is_encoded_as_any_frame(appid: str, msgid: str, content: bytes) -> None:
    frame = Frame(type="push", appid=appid, msgid=msgid, content=content)
    assert encode_push(appid, msgid, content) == encode(frame)
