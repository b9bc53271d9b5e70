"""The dashboard at /ui, driven in Debian's headless Chromium through Selenium: the overview
follows a send, a message is browsed and edited, a redrive's progress bar reaches 100%, a
purge asks first, and a server with a token asks for it once. Screenshots of the main pages
go to docs/dashboard/ when CONVEYOR_SCREENSHOTS is set."""

from __future__ import annotations

import functools
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from conveyor import Client, DeadLetterPolicy, QueueStats
from conveyor.push import GatewayConfig
from conveyor.server import ServerConfig

from ..support import waiting
from ..support.live import LiveServer
from ..support.push import Running

pytestmark = pytest.mark.slow

SHOTS = Path(__file__).resolve().parents[2] / "docs" / "dashboard"
WAIT = 20.0


@pytest.fixture(autouse=True)
def no_script_errors(browser: Any) -> Iterator[None]:
    """Every test ends with no JavaScript error in the page's console (a refused request is
    the server's answer, not a script error)."""
    browser.get_log("browser")
    yield
    errors = [
        e["message"]
        for e in browser.get_log("browser")
        if e["level"] == "SEVERE" and "Failed to load resource" not in e["message"]
    ]
    assert errors == []


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[LiveServer, Client]]:
    with (
        Client(f"sqlite:///{tmp_path}/ui.db?durability=normal") as client,
        LiveServer(client) as server,
    ):
        yield server, client


def until(driver: Any, check: Callable[[Any], Any], what: str) -> Any:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    # a page re-rendered between finding an element and reading it is looked at again
    wait = WebDriverWait(
        driver, WAIT, poll_frequency=0.1, ignored_exceptions=(StaleElementReferenceException,)
    )
    return wait.until(check, what)


def text_of(driver: Any, css: str) -> str:
    """The text of the first element `css` finds ("" where none): found again where a
    refresh re-rendered it between finding it and reading it."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    for _ in range(10):
        try:
            found = driver.find_elements(By.CSS_SELECTOR, css)
            return str(found[0].text) if found else ""
        except StaleElementReferenceException:
            continue
    raise AssertionError(f"{css} was re-rendered at each of ten reads")


def click(driver: Any, css: str) -> None:
    from selenium.webdriver.common.by import By

    def press(d: Any) -> bool:
        found = d.find_elements(By.CSS_SELECTOR, css)
        if found:
            found[0].click()
        return bool(found)

    until(driver, press, f"{css} to appear")


def shot(driver: Any, name: str) -> None:
    if os.environ.get("CONVEYOR_SCREENSHOTS"):
        SHOTS.mkdir(exist_ok=True)
        driver.save_screenshot(str(SHOTS / f"{name}.png"))


def test_overview_follows_a_send(browser: Any, live: tuple[LiveServer, Client]) -> None:
    from selenium.webdriver.common.by import By

    server, client = live
    orders = client.create_queue("orders")
    orders.send("one")
    browser.get(f"{server.url}/ui")
    ready = 'tr[data-queue="orders"] td.ready'
    until(browser, lambda d: text_of(d, ready) == "1", "the overview to show 1 ready")
    for i in range(4):
        orders.send(f"more {i}")
    until(browser, lambda d: text_of(d, ready) == "5", "the count to follow the sends")
    # an hour of history, as the sampler would have taken it, draws the sparklines
    history = server.conveyor.history
    history.forget(set())  # the samples of the last seconds would come before the hour's
    now = time.time()
    sent = 0
    for minute in range(60):
        sent += 600 + 400 * (minute % 7)
        history._now = functools.partial(float, now - 3600 + 60 * minute)
        depth = 5 + (minute % 20) * 3
        history.record(
            QueueStats(queue="orders", ready=depth, sent=sent, received=sent - depth),
            force=True,
        )
    history._now = time.time
    lines = 'tr[data-queue="orders"] svg.spark polyline'
    until(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, lines)) == 2, "sparklines")
    points = browser.find_elements(By.CSS_SELECTOR, lines)[0].get_attribute("points").split()
    assert len(points) >= 60  # one per sample
    xs = [float(p.split(",")[0]) for p in points]
    assert xs == sorted(xs) and xs[0] >= 0 and xs[-1] <= 120  # the hour, left to right
    ys = {p.split(",")[1] for p in points}
    assert len(ys) > 10  # the depth rose and fell
    shot(browser, "overview")


def test_overview_header_filter_sort_and_dead_letters_now(
    browser: Any, live: tuple[LiveServer, Client]
) -> None:
    from selenium.webdriver.common.by import By

    server, client = live
    client.create_queue("billing-dlq")
    billing = client.create_queue(
        "billing", dead_letter=DeadLetterPolicy(queue="billing-dlq", max_receive_count=1)
    )
    shipping = client.create_queue("shipping")
    for i in range(3):
        billing.send(f"b{i}")
    for i in range(5):
        shipping.send(f"s{i}")
    for _ in range(2):  # received once, then moved to billing-dlq at the second receive
        billing.receive(10, visibility_timeout=0)
    billing.send("fresh")
    browser.get(f"{server.url}/ui")
    dead = 'tr[data-queue="billing"] td.dead'
    until(browser, lambda d: text_of(d, dead) == "3", "what billing-dlq holds now")
    assert text_of(browser, 'tr[data-queue="shipping"] td.dead') == "-"
    assert "DLQ" in text_of(browser, 'tr[data-queue="billing-dlq"]')
    # the server at a glance: queues, messages ready and in dead-letter queues, connections
    stat = '[data-stat="{}"] .value'
    until(browser, lambda d: text_of(d, stat.format("queues")) == "3", "the header")
    assert text_of(browser, stat.format("ready")) == str(1 + 5 + 3)
    assert text_of(browser, stat.format("in dead-letter queues")) == "3"
    assert int(text_of(browser, stat.format("connections")) or 0) >= 1
    shot(browser, "overview-header")

    def listed(d: Any) -> list[str]:
        # read in one script, so that a refresh re-rendering the table between finding a
        # row and reading it (the page refreshes every second) cannot make it stale
        rows: list[str] = d.execute_script(
            "return Array.from(document.querySelectorAll('#queues tbody tr[data-queue]'),"
            " (row) => row.dataset.queue);"
        )
        return rows

    browser.find_element(By.ID, "queue-filter").send_keys("bill")
    until(browser, lambda d: listed(d) == ["billing", "billing-dlq"], "the filter")
    browser.find_element(By.ID, "queue-filter").clear()
    browser.find_element(By.ID, "queue-filter").send_keys(" ")  # clear() fires no input event
    browser.find_element(By.ID, "queue-filter").clear()
    browser.execute_script(
        "const f = document.getElementById('queue-filter'); f.dispatchEvent(new Event('input'));"
    )
    until(browser, lambda d: len(listed(d)) == 3, "every queue again")
    click(browser, 'th[data-sort="ready"]')  # most ready first
    until(browser, lambda d: listed(d)[0] == "shipping", "sorted by ready")
    click(browser, 'th[data-sort="ready"]')  # and the other way
    until(browser, lambda d: listed(d)[-1] == "shipping", "sorted the other way")
    # the order and the filter stay through the page's refreshes
    time.sleep(2.5)
    assert listed(browser)[-1] == "shipping"


def test_create_a_queue_send_search_and_delete_it(
    browser: Any, live: tuple[LiveServer, Client]
) -> None:
    from selenium.webdriver.common.by import By

    server, client = live
    client.create_queue("jobs-dlq.fifo")
    browser.get(f"{server.url}/ui")
    click(browser, "#new-queue")
    for field, value in (("nq-name", "jobs"), ("nq-visibility", "45"),
                         ("nq-dlq", "jobs-dlq.fifo"), ("nq-max", "3")):  # fmt: skip
        browser.find_element(By.ID, field).send_keys(value)
    click(browser, "#nq-fifo")
    click(browser, "#nq-cbd")
    shot(browser, "new-queue")
    click(browser, "#create-queue")
    until(browser, lambda d: "jobs.fifo" in client.list_queues(), "the queue made")
    attrs = client.queue_info("jobs.fifo").attributes
    assert attrs.fifo and attrs.content_based_dedup and attrs.visibility_timeout == 45
    assert attrs.dead_letter is not None and attrs.dead_letter.queue == "jobs-dlq.fifo"
    assert attrs.dead_letter.max_receive_count == 3
    # send from the queue's page: body, attributes, group
    browser.get(f"{server.url}/ui#/queue/jobs.fifo")
    until(browser, lambda d: d.find_elements(By.ID, "send-body"), "the send form")
    browser.find_element(By.ID, "send-body").send_keys('{"job": "invoice 7"}')
    browser.find_element(By.ID, "send-attributes").send_keys("team=billing\nurgent=yes")
    browser.find_element(By.ID, "send-group").send_keys("customer-7")
    click(browser, "#send-message")
    until(browser, lambda d: client.queue("jobs.fifo").stats().ready == 1, "the send")
    [m] = client.queue("jobs.fifo").peek(10)
    assert m.json() == {"job": "invoice 7"} and m.group_id == "customer-7"
    assert dict(m.attributes) == {"team": "billing", "urgent": "yes"}
    client.queue("jobs.fifo").send("other", group_id="g", dedup_id="d")
    shot(browser, "send")
    # search by body text, then by an attribute's value

    def rows(d: Any) -> list[str]:
        found = d.find_elements(By.CSS_SELECTOR, "#messages tbody tr[data-id]")
        return [r.get_attribute("data-id") for r in found]

    for words in ("invoice", "billing"):
        box = browser.find_element(By.ID, "search-id")
        box.clear()
        box.send_keys(words)
        click(browser, "#search")
        until(browser, lambda d: rows(d) == [m.id], f"the search for {words}")
    # delete asks first; dismissed, nothing goes
    click(browser, "#delete-queue")
    browser.switch_to.alert.dismiss()
    assert "jobs.fifo" in client.list_queues()
    click(browser, "#delete-queue")
    browser.switch_to.alert.accept()
    until(browser, lambda d: "jobs.fifo" not in client.list_queues(), "the queue deleted")
    until(browser, lambda d: d.find_elements(By.ID, "queues"), "back to the overview")


def test_a_queue_page_charts_its_hour(browser: Any, live: tuple[LiveServer, Client]) -> None:
    from selenium.webdriver.common.by import By

    server, client = live
    q = client.create_queue("charted")
    history = server.conveyor.history
    now = time.time()
    sent = received = deleted = 0
    for minute in range(60):
        sent += 100 + 10 * (minute % 5)
        received += 90
        deleted += 80
        history._now = functools.partial(float, now - 3600 + 60 * minute)
        history.record(
            QueueStats(
                queue="charted", ready=sent - received, sent=sent, received=received,
                deleted=deleted,
            ),
            force=True,
        )  # fmt: skip
    history._now = time.time
    browser.get(f"{server.url}/ui#/queue/charted")
    depth = "#chart-depth polyline"
    until(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, depth)) == 1, "the depth chart")
    lines = browser.find_elements(By.CSS_SELECTOR, "#chart-rates polyline")
    assert [line.get_attribute("data-series") for line in lines] == [
        "sent", "received", "deleted",
    ]  # fmt: skip
    for line in lines:
        assert len(line.get_attribute("points").split()) >= 59  # a point a sample
    assert "totals since created" in text_of(browser, "#counts-totals")
    assert "now:" in text_of(browser, "#counts-now")
    shot(browser, "charts")
    q.send("x")


def test_browse_and_edit_a_message(browser: Any, live: tuple[LiveServer, Client]) -> None:
    from selenium.webdriver.common.by import By

    server, client = live
    q = client.create_queue("orders")
    sent = q.send('{"sku": "A-101", "qty": 1}', attributes={"source": "web"})
    for i in range(3):
        q.send(f"other {i}", priority=i)
    browser.get(f"{server.url}/ui#/queue/orders")
    click(browser, f'tr[data-id="{sent.id}"] a')
    until(browser, lambda d: '"qty": 1' in text_of(d, "#message-body"), "the pretty body")
    browser.execute_script("window.scrollTo(0, 0)")
    shot(browser, "queue")
    click(browser, "#edit")
    body = browser.find_element(By.ID, "edit-body")
    body.clear()
    body.send_keys('{"sku": "A-101", "qty": 3}')
    priority = browser.find_element(By.ID, "edit-priority")
    priority.clear()
    priority.send_keys("7")
    shot(browser, "edit")
    click(browser, "#save-message")
    until(
        browser,
        lambda d: text_of(d, "#message-priority") == "7",
        f"the saved priority ({text_of(browser, '#status')})",
    )
    edited = q.get(sent.id)
    assert edited.json() == {"sku": "A-101", "qty": 3} and edited.priority == 7
    assert dict(edited.attributes) == {"source": "web"}


def test_redrive_all_reaches_100_percent(browser: Any, live: tuple[LiveServer, Client]) -> None:
    server, client = live
    dlq = client.create_queue("orders-dlq")
    client.create_queue(
        "orders", dead_letter=DeadLetterPolicy(queue="orders-dlq", max_receive_count=1)
    )
    for i in range(120):
        dlq.send(f"dead {i}")
    browser.get(f"{server.url}/ui#/queue/orders")
    click(browser, "#redrive-all")
    until(browser, lambda d: "100%" in text_of(d, "#redrive-done"), "the redrive to finish")
    bar = browser.find_element("id", "redrive-progress")
    assert bar.get_attribute("value") == bar.get_attribute("max") == "120"
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", bar)
    shot(browser, "redrive")
    assert dlq.stats().ready == 0 and client.queue("orders").stats().ready == 120


def test_attributes_and_a_purge_that_asks_first(
    browser: Any, live: tuple[LiveServer, Client]
) -> None:
    server, client = live
    q = client.create_queue("orders")
    for i in range(3):
        q.send(str(i))
    browser.get(f"{server.url}/ui#/queue/orders")
    # the page draws its form once the queue's attributes have arrived
    timeout = until(browser, lambda d: d.find_element("id", "attr-visibility_timeout"), "the form")
    timeout.clear()
    timeout.send_keys("45")
    browser.find_element("id", "attr-dlq-queue").send_keys("orders-dlq")
    client.create_queue("orders-dlq")
    click(browser, "#save-attributes")
    until(browser, lambda d: q.attributes.visibility_timeout == 45, "the attributes saved")
    assert q.attributes.dead_letter == DeadLetterPolicy(queue="orders-dlq", max_receive_count=5)
    click(browser, "#purge")
    until(browser, lambda d: d.switch_to.alert, "the confirmation").dismiss()
    assert q.stats().ready == 3  # said no: nothing happened
    click(browser, "#purge")
    until(browser, lambda d: d.switch_to.alert, "the confirmation").accept()
    until(browser, lambda d: q.stats().ready == 0, "the purge")


def test_a_token_is_asked_for_once(browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    with Client(f"sqlite:///{tmp_path}/ui.db") as client:
        client.create_queue("secret-orders")
        with LiveServer(client, ServerConfig(auth_token="s3cret")) as server:
            browser.get(f"{server.url}/ui")
            until(browser, lambda d: d.find_element(By.ID, "login").is_displayed(), "a login")
            assert "secret-orders" not in browser.page_source  # nothing without the token
            browser.find_element(By.ID, "token").send_keys("wrong")
            click(browser, "#login-submit")
            until(browser, lambda d: "refused" in text_of(d, "#login-error"), "a refusal")
            token = browser.find_element(By.ID, "token")
            token.clear()
            token.send_keys("s3cret")
            click(browser, "#login-submit")
            row = 'tr[data-queue="secret-orders"]'
            until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, row), "the queues")
            browser.get(f"{server.url}/ui#/consumers")  # kept in the tab: not asked again
            until(browser, lambda d: d.find_elements(By.ID, "consumers"), "the consumers page")
            assert not browser.find_element(By.ID, "login").is_displayed()
            browser.execute_script("sessionStorage.clear()")


def choose(queue: str) -> Callable[[Any], bool]:
    def pick(d: Any) -> bool:
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.select import Select

        found = d.find_elements(By.ID, "subscribe-orders")
        if found:
            Select(found[0]).select_by_value(queue)
        return bool(found)

    return pick


def subscribed(client: Client, queue: str) -> Callable[[Any], bool]:
    return lambda _: queue in client.topic_queues("orders")


def test_topics_and_consumers_pages(browser: Any, live: tuple[LiveServer, Client]) -> None:
    from selenium.webdriver.common.by import By

    server, client = live
    client.create_queue("billing")
    client.create_queue("shipping")
    worker = client.register_consumer("worker-1", queue="billing", info={"host": "h1"})
    browser.get(f"{server.url}/ui#/topics")
    until(browser, lambda d: d.find_elements(By.ID, "new-topic"), "the topics page")
    browser.find_element(By.ID, "new-topic").send_keys("orders")
    click(browser, "#create-topic")
    for queue in ("billing", "shipping"):
        until(browser, choose(queue), "the topic")
        click(browser, '[data-topic="orders"] .subscribe')
        until(browser, subscribed(client, queue), "the subscription")
    click(browser, '[data-topic="orders"] .publish')
    until(browser, lambda d: client.queue("shipping").stats().ready == 1, "the fan-out")
    assert client.queue("billing").stats().ready == 1
    shot(browser, "topics")
    # a consumer of the push gateway on the same store is listed beside the worker
    gateway = Running(client, replace(GatewayConfig(port=0), rate=0))
    try:
        with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as sock:
            info = {"id": "c-7", "app_id": "billing", "host": "", "port": "", "weight": 4}
            sock.sendall(f"type=register\r\ncontent={json.dumps(info)}\r\n\r\n".encode())
            assert b"Recipient register successful." in sock.recv(4096)
            # the gateway enters it in the registry after its answer: the page is loaded once
            # it is there (a busy machine's page refreshes as seldom as twenty times as long
            # as a refresh takes)
            key = "skmq:billing:c-7"
            waiting.until(lambda: key in {c.id for c in client.list_consumers()}, WAIT, "the entry")
            browser.get(f"{server.url}/ui#/consumers")
            row = f'tr[data-consumer="{worker.id}"]'
            until(browser, lambda d: "ago" in text_of(d, row), "the consumer and its heartbeat")
            pushed = 'tr[data-consumer="skmq:billing:c-7"]'
            until(browser, lambda d: "push gateway" in text_of(d, pushed), "the gateway's")
            cells = text_of(browser, pushed)
            assert "connection" in cells and "4" in cells
            shot(browser, "consumers")
    finally:
        gateway.close()
    client.unregister_consumer(worker.id)


def test_history_gives_an_hour_of_depth_and_rates() -> None:
    from conveyor.models import QueueStats
    from conveyor.server.dashboard.routes import History

    now = [1000.0]
    history = History(now=lambda: now[0])

    def at(t: float, ready: int, sent: int, received: int) -> None:
        now[0] = 1000.0 + t
        history.record(QueueStats(queue="q", ready=ready, sent=sent, received=received))

    at(0, 0, 0, 0)
    at(5, 9, 9, 0)  # within 10 s of the last point: not kept
    at(10, 30, 50, 20)
    at(20, 10, 60, 50)
    series = history.series("q")
    assert [d for _, d in series["depth"]] == [0, 30, 10]
    assert [r for _, r in series["rate"]] == [5.0, 1.0]
    assert [r for _, r in series["received"]] == [2.0, 3.0]
    at(3615, 0, 60, 60)  # an hour on: the first points are gone
    assert [d for _, d in history.series("q")["depth"]] == [10, 0]
    history.forget(set())
    assert history.series("q") == {"depth": [], "rate": [], "received": [], "deleted": []}


def test_beyond_loopback_nothing_without_the_token() -> None:
    import asyncio

    import httpx

    from conveyor.server import ConveyorServer

    async def visit() -> None:
        with Client("memory://") as client:
            client.create_queue("secret-orders")
            app = ConveyorServer(client, ServerConfig(auth_token="s3cret")).app
            for remote, opened in ((("203.0.113.7", 40000), False), (("127.0.0.1", 40000), True)):
                transport = httpx.ASGITransport(app=app, client=remote)
                async with httpx.AsyncClient(transport=transport, base_url="http://x") as http:
                    page = (await http.get("/ui")).text
                    assert ('src="/ui/app.js"' in page) is opened  # else only the sign-in form
                    assert (await http.get("/ui/app.js")).status_code == (200 if opened else 401)
                    assert (await http.get("/ui/api/overview")).status_code == 401
                    assert "secret-orders" not in page
                    http.cookies.set("conveyor_token", "s3cret", path="/ui")
                    assert (await http.get("/ui/app.js")).status_code == 200
                    assert 'src="/ui/app.js"' in (await http.get("/ui")).text
                    # the cookie opens the page's files, never the API
                    assert (await http.get("/ui/api/overview")).status_code == 401
                    assert (await http.get("/queues")).status_code == 401
                    bearer = {"Authorization": "Bearer s3cret"}
                    got = await http.get("/ui/api/overview", headers=bearer)
                    assert [q["queue"] for q in got.json()["queues"]] == ["secret-orders"]

    asyncio.run(visit())


def test_the_sampler_keeps_history_without_a_page_open() -> None:
    from conveyor.server.dashboard.routes import History, sample

    now = [0.0]
    history = History(now=lambda: now[0])
    with Client("memory://") as client:
        a = client.create_queue("a")
        client.create_queue("b")
        for t, depth in ((0, 0), (10, 3), (20, 5)):
            while a.stats().total < depth:
                a.send("x")
            now[0] = t
            sample(client, history)
        assert [d for _, d in history.series("a")["depth"]] == [0, 3, 5]
        assert [d for _, d in history.series("b")["depth"]] == [0, 0, 0]
        client.delete_queue("b")
        sample(client, history)
        assert history.series("b")["depth"] == []


def test_a_costly_count_is_shared_until_it_is_twenty_times_as_old() -> None:
    """The overview, the sampler and /metrics count a queue afresh when its count was cheap;
    a count that took 0.3 s (a deep queue on a SQL store) serves every look for the next 6 s."""
    from conveyor.server.counts import SharedCounts
    from conveyor.server.dashboard.routes import History, sample
    from conveyor.server.metrics import Metrics

    now = [100.0]
    cost = [0.0001]
    clock = [0.0]

    def timer() -> float:
        clock[0] += cost[0]  # each count takes `cost` between the readings around it
        return clock[0]

    shared = SharedCounts(now=lambda: now[0], timer=timer)
    history = History(now=lambda: now[0], counts=shared)
    with Client("memory://") as client:
        metrics = Metrics(client, counts=shared)
        q = client.create_queue("deep")
        q.send("one")
        assert history.counts(client, "deep").ready == 1
        q.send("two")
        assert history.counts(client, "deep").ready == 2  # cheap: counted afresh at once
        cost[0] = 0.3
        now[0] += 1
        assert history.counts(client, "deep").ready == 2
        q.send("three")
        for seconds in (1.0, 5.9):
            now[0] = 101 + seconds
            assert history.counts(client, "deep").ready == 2  # the 0.3 s count, reused
            sample(client, history)
            assert 'conveyor_queue_visible{queue="deep"} 2.0' in metrics.exposition().decode()
        now[0] = 101 + 6.1
        assert history.counts(client, "deep").ready == 3
        # a queue deleted and made again is counted afresh, not from its namesake's count
        client.delete_queue("deep")
        sample(client, history)
        client.create_queue("deep")
        assert history.counts(client, "deep").ready == 0
