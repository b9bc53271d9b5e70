"""The server against hostile requests: signatures bound to the body and the service,
presigned URLs, pages of other sites acting through a browser, malformed input, the one
error shape."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import xml.etree.ElementTree as ET
from unittest import mock

import httpx
from botocore.auth import SigV4Auth, SigV4QueryAuth
from botocore.awsrequest import AWSRequest

from conveyor import Client
from conveyor.server import ServerConfig

from ..support.credentials import GOOD
from ..support.live import LiveServer


def signed(
    url: str, body: str, *, extra: dict[str, str] | None = None, service: str = "sqs"
) -> AWSRequest:
    request = AWSRequest(
        method="POST",
        url=url + "/",
        data=body.encode(),
        headers={"Content-Type": "application/x-www-form-urlencoded", **(extra or {})},
    )
    SigV4Auth(GOOD, service, "us-east-1").add_auth(request)
    return request


def send(request: AWSRequest, body: bytes | None = None) -> httpx.Response:
    data = body if body is not None else request.body
    assert isinstance(data, bytes)
    return httpx.post(request.url, content=data, headers=dict(request.headers.items()))


def test_a_signature_binds_the_body(secured: LiveServer) -> None:
    listing = signed(secured.url, "Action=ListQueues")
    assert send(listing).status_code == 200
    # the captured signature replayed with another body (another action) is refused
    replay = send(listing, b"Action=CreateQueue&QueueName=evil")
    assert replay.status_code == 403 and b"SignatureDoesNotMatch" in replay.content
    # a payload hash header that is signed but is not the body's hash
    forged = signed(
        secured.url,
        "Action=ListQueues",
        extra={"X-Amz-Content-SHA256": hashlib.sha256(b"Action=ListQueues").hexdigest()},
    )
    assert send(forged).status_code == 200
    replay = send(forged, b"Action=CreateQueue&QueueName=evil")
    assert replay.status_code == 403
    # a payload hash header left out of the signature
    unsigned = signed(secured.url, "Action=ListQueues")
    headers = dict(unsigned.headers.items())
    headers["X-Amz-Content-SHA256"] = "UNSIGNED-PAYLOAD"
    r = httpx.post(unsigned.url, content=unsigned.body, headers=headers)
    assert r.status_code == 403 and b"not signed" in r.content
    # a valid signature with anything after it in the header is not that signature
    for tail in ("0", ", Signature=" + "0" * 64, " junk"):
        request = signed(secured.url, "Action=CreateQueue&QueueName=evil")
        headers = dict(request.headers.items())
        headers["Authorization"] += tail
        r = httpx.post(request.url, content=request.body, headers=headers)
        assert r.status_code == 403 and b"SignatureDoesNotMatch" in r.content, tail
    with Client("memory://") as check:
        assert "evil" not in check.list_queues()


def test_a_signature_for_another_service_is_refused(secured: LiveServer) -> None:
    """The credential scope names the service the signature is for: an SQS request signed
    for S3 (or for DynamoDB) is refused as SQS refuses it, whether in the Authorization
    header or presigned; SNS takes its own scope (and STS's, for GetCallerIdentity)."""
    for service in ("s3", "dynamodb"):
        r = send(signed(secured.url, "Action=CreateQueue&QueueName=scoped", service=service))
        assert r.status_code == 403 and b"SignatureDoesNotMatch" in r.content, service
        assert b"Credential should be scoped to correct service: 'sqs'." in r.content
        request = AWSRequest(
            method="GET",
            url=secured.url + "/",
            params={"Action": "CreateQueue", "QueueName": "scoped", "Version": "2012-11-05"},
        )
        SigV4QueryAuth(GOOD, service, "us-east-1", expires=60).add_auth(request)
        r = httpx.get(str(request.prepare().url))
        assert r.status_code == 403 and b"SignatureDoesNotMatch" in r.content, service
    with Client("memory://") as check:
        assert "scoped" not in check.list_queues()
    topics = send(signed(secured.url, "Action=ListTopics", service="sns"))
    assert topics.status_code == 200 and b"ListTopicsResponse" in topics.content
    who = send(signed(secured.url, "Action=GetCallerIdentity", service="sts"))
    assert who.status_code == 200 and b"AKIDGOOD" not in who.content
    assert send(signed(secured.url, "Action=ListQueues")).status_code == 200


def test_with_credentials_a_browser_may_name_the_server_as_it_likes(secured: LiveServer) -> None:
    """Where the server asks for credentials, a page that has none gets nothing by naming
    it otherwise: requests carrying them pass by any host name (a proxy's public one)."""
    headers = {"Sec-Fetch-Site": "same-origin", "Host": "queues.example.com"}
    r = httpx.get(secured.url + "/queues", headers={**headers, "Authorization": "Bearer t0ken"})
    assert r.status_code == 200
    assert httpx.get(secured.url + "/queues", headers=headers).status_code == 401
    listing = signed(secured.url, "Action=ListQueues", extra={"Sec-Fetch-Site": "same-origin"})
    assert send(listing).status_code == 200


def test_a_signature_from_another_time_is_refused(secured: LiveServer) -> None:
    then = dt.datetime.now(dt.UTC).replace(tzinfo=None) - dt.timedelta(minutes=20)
    with mock.patch("botocore.auth.get_current_datetime", return_value=then):
        old = signed(secured.url, "Action=ListQueues")
    r = send(old)
    assert r.status_code == 403 and b"Signature expired" in r.content


def presign(url: str, expires: int, when: dt.datetime | None = None) -> str:
    request = AWSRequest(
        method="GET", url=url + "/", params={"Action": "ListQueues", "Version": "2012-11-05"}
    )
    if when is None:
        SigV4QueryAuth(GOOD, "sqs", "us-east-1", expires=expires).add_auth(request)
    else:
        with mock.patch("botocore.auth.get_current_datetime", return_value=when):
            SigV4QueryAuth(GOOD, "sqs", "us-east-1", expires=expires).add_auth(request)
    return str(request.prepare().url)


def test_presigned_urls(secured: LiveServer) -> None:
    url = presign(secured.url, 300)
    ok = httpx.get(url)
    assert ok.status_code == 200 and b"ListQueuesResponse" in ok.content
    tampered = url.replace("ListQueues", "ListQueuez", 1)
    assert httpx.get(tampered).status_code == 403
    bad = url[:-4] + ("0000" if not url.endswith("0000") else "1111")
    r = httpx.get(bad)
    assert r.status_code == 403 and b"SignatureDoesNotMatch" in r.content
    then = dt.datetime.now(dt.UTC).replace(tzinfo=None) - dt.timedelta(minutes=10)
    expired = httpx.get(presign(secured.url, 60, then))
    assert expired.status_code == 403 and b"expired" in expired.content
    still = httpx.get(presign(secured.url, 3600, then))
    assert still.status_code == 200


def test_deeply_nested_json_is_a_400(server: LiveServer) -> None:
    body = b'{"QueueNamePrefix": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    r = httpx.post(
        server.url + "/",
        content=body,
        headers={
            "X-Amz-Target": "AmazonSQS.ListQueues",
            "Content-Type": "application/x-amz-json-1.0",
        },
    )
    assert r.status_code == 400, r.text
    assert "__type" in r.json()
    rest = httpx.post(
        server.url + "/queues/nested/messages",
        content=b'{"body": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        headers={"Content-Type": "application/json"},
    )
    assert rest.status_code in (400, 422) and set(rest.json()) == {"error", "code"}


def test_a_page_of_another_site_cannot_act_through_a_browser(
    server: LiveServer, store: Client
) -> None:
    """A browser's request for a page elsewhere (a form posted here, an image naming a query
    action) carries an Origin that is not this host, or Sec-Fetch-Site saying so: refused
    with AccessDenied before it does anything, on the SQS, SNS and REST APIs alike. Reads of
    the REST API and the dashboard stay open to links; programs send no Origin, and the
    dashboard's own requests come from its origin."""
    url = server.url
    queue = f"{url}/000000000000/kept"
    store.create_queue("kept").send(b"m")
    evil = {"Origin": "http://evil.example"}
    attempts = [
        ("POST", "/", evil, {"Action": "CreateQueue", "QueueName": "made"}),
        ("POST", "/", {"Origin": "null"}, {"Action": "PurgeQueue", "QueueUrl": queue}),
        ("GET", "/", {"Sec-Fetch-Site": "cross-site"}, {"Action": "PurgeQueue", "QueueUrl": queue}),
        ("GET", "/000000000000/kept", {"Sec-Fetch-Site": "same-site"}, {"Action": "PurgeQueue"}),
        ("POST", "/", evil, {"Action": "CreateTopic", "Name": "made"}),
        # a port of this host is another origin: a page served there is refused too
        (
            "POST",
            "/",
            {"Origin": "http://127.0.0.1:1"},
            {"Action": "DeleteQueue", "QueueUrl": queue},
        ),
    ]
    for method, path, headers, params in attempts:
        if method == "GET":
            r = httpx.get(url + path, params=params, headers=headers)
        else:
            r = httpx.post(url + path, data=params, headers=headers)
        assert r.status_code == 403, (headers, params)
        code = ET.fromstring(r.content).find(".//{*}Code")
        assert code is not None and code.text == "AccessDenied"
        assert "another site" in r.text
    sent = httpx.post(
        url + "/",
        content=json.dumps({"QueueUrl": queue, "MessageBody": "x"}),
        headers={
            **evil,
            "X-Amz-Target": "AmazonSQS.SendMessage",
            "Content-Type": "application/x-amz-json-1.0",
        },
    )
    assert sent.status_code == 403 and sent.json()["__type"].endswith("AccessDenied")
    posted = httpx.post(
        url + "/queues/kept/messages",
        content=json.dumps({"messages": [{"body": "x"}]}),
        headers={**evil, "Content-Type": "text/plain"},
    )
    assert posted.status_code == 403 and posted.json()["code"] == "AccessDenied"
    assert store.queue("kept").stats().ready == 1  # nothing was sent, purged or deleted
    assert store.list_queues() == ["kept"]
    assert not store.list_topics()
    # reads and the dashboard: a link from elsewhere opens them
    cross = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}
    assert httpx.get(url + "/ui", headers=cross).status_code == 200
    assert httpx.get(url + "/queues", headers=cross).status_code == 200
    # the dashboard's own requests, and programs
    own = {"Origin": url, "Sec-Fetch-Site": "same-origin"}
    for headers in (own, {}):
        r = httpx.post(url + "/", data={"Action": "ListQueues"}, headers=headers)
        assert r.status_code == 200 and "kept" in r.text
    assert server.sqs().get_queue_url(QueueName="kept")["QueueUrl"] == queue


def test_a_browser_naming_the_server_otherwise_is_refused_without_credentials() -> None:
    """DNS rebinding: a page at a name made to resolve to this machine is the server's own
    origin to the browser. Without credentials to ask for, a browser's request (it carries
    Origin or Sec-Fetch-Site) naming the server by a host that is not localhost, an IP
    address or an --allowed-host is refused, reads included; programs (no such headers),
    the server's own names and allowed ones pass, and so do requests with credentials."""
    browser = {"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors"}

    def calls(url: str, host: str, **extra: str) -> list[int]:
        headers = {**browser, "Host": host, "Origin": f"http://{host}", **extra}
        return [
            httpx.post(url + "/", data={"Action": "ListQueues"}, headers=headers).status_code,
            httpx.get(url + "/queues", headers=headers).status_code,
            httpx.get(url + "/ui", headers=headers).status_code,
        ]

    with Client("memory://") as client, LiveServer(client) as live:
        port = live.port
        refused = httpx.get(
            live.url + "/queues", headers={**browser, "Host": f"rebind.example:{port}"}
        )
        assert refused.status_code == 403 and "--allowed-host rebind.example" in refused.text
        assert calls(live.url, f"rebind.example:{port}") == [403, 403, 403]
        sqs = httpx.post(
            live.url + "/",
            data={"Action": "ListQueues"},
            headers={**browser, "Host": "rebind.example"},
        )
        assert sqs.status_code == 403 and "or give it --aws-credentials" in sqs.text
        assert "or give it --auth-token" in refused.text
        for own in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "app.localhost"):
            assert calls(live.url, own) == [200, 200, 200], own
        program = {"Host": f"rebind.example:{port}"}  # a proxy's, say: no browser headers
        assert httpx.get(live.url + "/queues", headers=program).status_code == 200
    config = ServerConfig(allowed_hosts=("queues.example.com",))
    with Client("memory://") as client, LiveServer(client, config) as live:
        assert calls(live.url, "queues.example.com") == [200, 200, 200]
        assert calls(live.url, "other.example.com") == [403, 403, 403]


def test_query_errors_never_carry_what_xml_cannot(server: LiveServer) -> None:
    for action in ("List\x00Queues", "Bad\uffffAction", "x\x1b"):
        r = httpx.post(server.url + "/", data={"Action": action})
        assert r.status_code == 400
        root = ET.fromstring(r.content)  # parses: the reply is well-formed
        assert root.find(".//{*}Code") is not None


def test_rest_errors_have_one_shape(server: LiveServer) -> None:
    missing = httpx.get(server.url + "/no/such/route")
    assert missing.status_code == 404
    assert missing.json() == {"error": "Not Found", "code": "NotFound"}
    wrong = httpx.put(server.url + "/healthz")
    assert wrong.status_code == 405 and wrong.json()["code"] == "MethodNotAllowed"
    assert "GET" in wrong.headers["allow"]
    invalid = httpx.post(server.url + "/queues/any/messages", json={"delay": "soon"})
    assert invalid.status_code == 400 and set(invalid.json()) == {"error", "code"}


def test_metrics_token_opens_metrics_alone(secured: LiveServer) -> None:
    scrape = {"Authorization": "Bearer scrape"}
    assert httpx.get(secured.url + "/metrics", headers=scrape).status_code == 200
    assert httpx.get(secured.url + "/queues", headers=scrape).status_code == 401
    full = {"Authorization": "Bearer t0ken"}
    assert httpx.get(secured.url + "/metrics", headers=full).status_code == 200
    assert httpx.get(secured.url + "/metrics").status_code == 401
