"""--trusted-proxy: whose forwarding headers are believed, and what they change."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from conveyor import Client
from conveyor.exceptions import InvalidInput
from conveyor.server import ConveyorServer, ServerConfig, check_exposure
from conveyor.server.front.proxies import Forwarded, TrustedProxies

PROXY = TrustedProxies(["127.0.0.1", "10.0.0.0/8"])


def test_nothing_is_believed_from_an_untrusted_peer() -> None:
    headers = {"x-forwarded-for": "1.2.3.4", "x-forwarded-proto": "https", "forwarded": "for=5"}
    assert PROXY.resolve("http", headers, "192.0.2.9") is None
    assert TrustedProxies().resolve("http", headers, "127.0.0.1") is None
    assert not TrustedProxies()


def test_x_forwarded_headers_of_a_trusted_proxy() -> None:
    headers = {
        "x-forwarded-for": "203.0.113.7",
        "x-forwarded-proto": "https",
        "x-forwarded-host": "queues.example.com",
    }
    assert PROXY.resolve("http", headers, "127.0.0.1") == Forwarded(
        scheme="https", host="queues.example.com", client="203.0.113.7"
    )
    # a port the proxy was reached on, unless it is the scheme's own
    headers["x-forwarded-port"] = "8443"
    assert PROXY.resolve("http", headers, "127.0.0.1").host == "queues.example.com:8443"  # type: ignore[union-attr]
    headers["x-forwarded-port"] = "443"
    assert PROXY.resolve("http", headers, "127.0.0.1").host == "queues.example.com"  # type: ignore[union-attr]


def test_the_client_is_the_first_untrusted_hop_from_the_right() -> None:
    # a client that sends its own X-Forwarded-For cannot choose the address seen
    headers = {"x-forwarded-for": "6.6.6.6, 203.0.113.7, 10.1.2.3"}
    view = PROXY.resolve("http", headers, "127.0.0.1")
    assert view is not None and view.client == "203.0.113.7"


def test_rfc_7239_forwarded() -> None:
    headers = {
        "forwarded": 'for=203.0.113.7;proto=https;host="q.example.com:8443",'
        ' for="[2001:db8::1]:4711";proto=http;host=inner',
        "x-forwarded-proto": "http",  # Forwarded wins where both are present
    }
    v6 = TrustedProxies(["2001:db8::/32", "127.0.0.1"])
    assert v6.resolve("http", headers, "127.0.0.1") == Forwarded(
        scheme="https", host="q.example.com:8443", client="203.0.113.7"
    )
    # the hop nearest the server only, when the one before it is not trusted
    assert PROXY.resolve("http", headers, "127.0.0.1") == Forwarded(
        scheme="http", host="inner", client="2001:db8::1"
    )


@pytest.mark.parametrize(
    "host", ["evil.com/path", "a b", "user@evil.com", "x" * 300, "evil.com#", "[zz]"]
)
def test_a_host_that_is_not_a_host_is_ignored(host: str) -> None:
    view = PROXY.resolve(
        "http", {"x-forwarded-host": host, "x-forwarded-for": "1.1.1.1"}, "10.0.0.1"
    )
    assert view is not None and view.host is None


def test_only_http_and_https_are_schemes() -> None:
    view = PROXY.resolve("http", {"x-forwarded-proto": "javascript"}, "10.0.0.1")
    assert view is not None and view.scheme == "http"


def test_unix_socket_peers_only_with_unix() -> None:
    headers = {"x-forwarded-proto": "https"}
    assert PROXY.resolve("http", headers, None) is None
    view = TrustedProxies(["unix"]).resolve("http", headers, None)
    assert view is not None and view.scheme == "https"


def test_a_bad_trusted_proxy_says_what_to_give() -> None:
    with pytest.raises(InvalidInput, match="not an IP address or network"):
        TrustedProxies(["proxy.example.com"])


def test_a_trusted_proxy_needs_auth_as_a_public_address_does() -> None:
    config = ServerConfig(trusted_proxies=("127.0.0.1",))
    with pytest.raises(InvalidInput, match=r"trusted proxy .* beyond this machine"):
        check_exposure("127.0.0.1", config, insecure=False)
    check_exposure("127.0.0.1", config, insecure=True)
    check_exposure("127.0.0.1", ServerConfig(), insecure=False)


@pytest.mark.parametrize(
    ("trusted", "expected"),
    [
        ((), "http://testserver/000000000000/q"),
        (("10.0.0.0/8",), "http://testserver/000000000000/q"),  # not the peer
        (("192.0.2.0/24",), "https://queues.example.com/000000000000/q"),
    ],
)
def test_queue_urls_follow_a_trusted_proxy_only(trusted: tuple[str, ...], expected: str) -> None:
    headers = {
        "X-Amz-Target": "AmazonSQS.CreateQueue",
        "Content-Type": "application/x-amz-json-1.0",
        "X-Forwarded-Proto": "https",
        "X-Forwarded-Host": "queues.example.com",
    }
    with Client("memory://") as client:
        server = ConveyorServer(client, ServerConfig(trusted_proxies=trusted))
        transport = httpx.ASGITransport(server.app, client=("192.0.2.1", 5000))

        async def create() -> httpx.Response:
            async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
                return await c.post("/", content=b'{"QueueName": "q"}', headers=headers)

        assert asyncio.run(create()).json()["QueueUrl"] == expected
