"""`rmq console` as a person uses it: real broker and name server processes, the real `rmq console`
process, and headless Chromium (Debian's, driven by Playwright) clicking through it. The group
page's numbers match `rmq group progress --json`; a dead letter resent from the DLQ page arrives;
an unknown topic is a 404 page saying so; every page is read with the cluster up, with one broker
down (named, figures marked incomplete) and with the only live broker down (503 naming it).
With RMQ_CONSOLE_SCREENSHOTS=DIR (`make console-screenshots`: docs/console/) the pages are saved
there as the PNGs docs/console.md shows."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest

from integration_tests.reliability.test_controller_etcd import GROUP, etcd_controlled_group
from integration_tests.reliability.test_controller_failover import status as controller_status
from integration_tests.reliability.test_controller_failover import wait
from rmq import __version__, retry
from rmq.connector.client import MessageQueue, OutgoingMessage, RmqClient
from rmq.connector.errors import RmqError
from rmq.connector.message import decode_messages
from rmq.rocketmq_v2 import definition_pb2 as v2
from rmq.statuses import PullStatus
from rmq.v1 import rmq_pb2
from testing import processes
from testing.etcd import etcd_missing
from tests.acl_files import write_acl
from tests.broker_server.v2_calls import TelemetryStream, V2Client
from tests.waiting import wait_until

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
sync_api = pytest.importorskip("playwright.sync_api",
                               reason="playwright is not installed (pip install '.[test]')")
MESSAGE_PAGE = re.compile(r"/messages/[0-9A-F]{32}$")


@pytest.fixture
def console(broker: processes.ServerProcess, tmp_path: Path) -> Iterator[str]:
    with _console(broker.address, tmp_path) as url:
        yield url


@contextlib.contextmanager
def _console(endpoints: str, tmp_path: Path) -> Iterator[str]:
    listen = f"127.0.0.1:{processes.free_port()}"
    log = open(tmp_path / "console.log", "ab")
    command = [sys.executable, "-m", "rmq.cli", "console", "--endpoints", endpoints, "--listen", listen,
               "--chart-interval", "1"]
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    try:
        _wait_http(f"http://{listen}/sign-in", process)
        yield f"http://{listen}"
    finally:
        process.terminate()
        process.wait(20)


def _wait_http(url: str, process: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"rmq console exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.1)
    raise AssertionError(f"rmq console did not answer {url} within {timeout} s")


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """One Chromium for the module's tests (each gets its own page and cookies)."""
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (make venv installs it as root)")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def browser(chromium: Any) -> Iterator[Any]:
    context = chromium.new_context()
    try:
        page = context.new_page()
        page.set_default_timeout(15_000)
        yield page
    finally:
        context.close()


def test_a_person_checks_lag_and_resends_a_dead_letter(broker: processes.ServerProcess, console: str,
                                                        browser: Any) -> None:
    with RmqClient(broker.address) as client:
        client.create_topic("Orders", queues=2)
        client.send("Orders", [OutgoingMessage(f"order {i}".encode(), queue_id=i % 2) for i in range(7)])
        client.heartbeat("client-a", "g1", {"Orders": "*"})
        client.update_consumer_offsets("g1", {MessageQueue("Orders", "broker-a", 0): 2})
        client.send_message_back("g1", "broker-a", 0, delay_level=-1)        # "order 0" to the DLQ
    progress = json.loads(subprocess.run(
        [sys.executable, "-m", "rmq.cli", "group", "progress", "g1", "--json", "--endpoints", broker.address],
        capture_output=True, text=True, check=True).stdout)

    browser.goto(console + "/")
    assert "broker-a" in browser.inner_text("#brokers")
    browser.click("text=Consumer groups")
    _follow(browser, "#groups >> text=g1", "**/groups/g1")
    assert browser.inner_text("#total-lag") == str(progress["total_lag"])
    rows = browser.locator("#progress tr").all_inner_texts()[1:]
    shown = {(cells[0], int(cells[2])): int(cells[5]) for cells in (row.split("\t") for row in rows)}
    assert shown == {(q["topic"], q["queue_id"]): q["lag"] for q in progress["queues"]}
    assert "client-a" in browser.inner_text("#members")

    browser.click("text=dead letters: 1")
    assert "order 0" in browser.inner_text("#dead-letters")
    browser.check("#dead-letters input[name=msg_id]")
    browser.select_option("#resend select", "group")
    browser.once("dialog", lambda dialog: dialog.accept())
    browser.click("#resend button")
    with RmqClient(broker.address) as client:      # readable once the broker dispatched the resent copy
        retry_queue = client.route(retry.retry_topic("g1")).message_queues[0]
        resent = wait_until(lambda: _found(client.browse_messages(retry_queue, 0, 10)),
                            "the resent copy in g1's retry queue")
    assert b"order 0" in resent.messages.records

    response = browser.goto(console + "/topics/Nope")
    assert response is not None and response.status == 404
    assert "topic Nope does not exist" in browser.inner_text("#error")


# counts the answers the page's fetch() calls have read, once the code awaiting each has run on
ANSWERS_READ = """(() => {
  const fetch = window.fetch.bind(window);
  window.answersRead = 0;
  window.fetch = async (...args) => {
    const response = await fetch(...args);
    const json = response.json.bind(response);
    response.json = async () => {
      const value = await json();
      setTimeout(() => { window.answersRead += 1; });
      return value;
    };
    return response;
  };
})();"""


def test_charts_paused_while_a_refresh_is_on_its_way_stay_paused(console: str, browser: Any) -> None:
    """Pause clicked while the charts' request is on its way: its answer, arriving after, neither
    redraws them nor replaces "paused" (a loaded `make test` read "updated 6:49:41 AM" right after
    the click); Resume refreshes them again."""
    held: list[Any] = []
    browser.add_init_script(ANSWERS_READ)
    browser.route("**/api/charts", lambda route: held.append(route))
    with browser.expect_request("**/api/charts"):
        browser.goto(console + "/")
    browser.click("#pause-charts")
    assert browser.inner_text("#chart-status") == "paused" and len(held) == 1
    held[0].continue_()                     # the answer comes after the click
    browser.wait_for_function("() => window.answersRead === 1")
    assert browser.inner_text("#chart-status") == "paused"
    assert browser.locator("#charts .u-legend").count() == 0            # nothing drawn
    browser.unroute("**/api/charts")
    browser.click("#pause-charts")          # resumed: refreshed again
    browser.wait_for_selector("#chart-status >> text=updated")


def _found(result: Any) -> Any:
    """A browse's answer when it found messages, else None."""
    return result if result.pull_status == PullStatus.FOUND else None


def _follow(browser: Any, selector: str, url: str | re.Pattern[str]) -> None:
    """Click the link at `selector` and wait until the page at `url` has loaded: a click returns once
    the next page's navigation commits (its headers arrived), before its body is parsed, and a read
    that does not wait (locator.all(), all_inner_texts()) could see a page without its tables."""
    browser.click(selector)
    browser.wait_for_url(url)


def _shot(browser: Any, name: str) -> None:
    """Save the page as docs/console/<name>.png when RMQ_CONSOLE_SCREENSHOTS names a directory."""
    folder = os.environ.get("RMQ_CONSOLE_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        browser.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


def _v5_consumer(address: str) -> TelemetryStream:
    """A RocketMQ 5 SimpleConsumer of Orders in group v5-group (its Telemetry session only)."""
    settings = v2.Settings(client_type=v2.SIMPLE_CONSUMER, subscription=v2.Subscription(
        group=v2.Resource(name="v5-group"),
        subscriptions=[v2.SubscriptionEntry(topic=v2.Resource(name="Orders"),
                                            expression=v2.FilterExpression(expression="*"))]))
    stream = TelemetryStream(V2Client(grpc.insecure_channel(address), "v5-client"), settings)
    assert stream.next().status.code == v2.OK
    return stream


def test_every_page_with_the_cluster_up_one_broker_down_and_the_only_one_down(
        namesrv: processes.ServerProcess, tmp_path: Path, browser: Any) -> None:
    """#46 defects 1-3 as a person sees them: keys in the Keys column; RocketMQ 5 groups listed;
    with broker-b down every page that asks it names it and marks its figures incomplete; with
    broker-a down too, pages are 503 naming what could not be reached, never "no dead letter" or
    lag 0."""
    broker_a = processes.broker(tmp_path, namesrv_address=namesrv.address).start()
    broker_b = processes.broker(tmp_path, "broker-b", namesrv_address=namesrv.address).start()
    try:
        with RmqClient(broker_a.address) as on_a, RmqClient(broker_b.address) as on_b:
            on_a.create_topic("Orders", queues=2)
            on_b.create_topic("Payments", queues=1)
            on_a.send("Orders", [OutgoingMessage(f"order {i}".encode(), keys=f"k{i} shared", queue_id=i % 2)
                                 for i in range(6)])
            on_a.send("Orders", [OutgoingMessage(b"later", properties={"TIMER_DELAY_SEC": "600"})])
            on_a.heartbeat("client-a", "g1", {"Orders": "*"})
            on_a.update_consumer_offsets("g1", {MessageQueue("Orders", "broker-a", 0): 1})
            stored = on_a.browse_messages(MessageQueue("Orders", "broker-a", 1), 0, 3)
            for record in decode_messages(stored.messages, MessageQueue("Orders", "broker-a", 1)):
                on_a.send_message_back("g1", "broker-a", record.commit_log_offset, delay_level=-1)
            on_a.pull(MessageQueue("Orders", "broker-a", 0), 0, 32, group="g1")     # g1 consumes: 3
        with RmqClient(namesrv.address) as client:
            wait_until(lambda: set(client.list_brokers()) == {"broker-a", "broker-b"}, "both registered")
            for topic in ("Orders", "Payments"):
                wait_until(lambda name=topic: _routed(client, name), f"{topic} routed")
        v5 = _v5_consumer(broker_a.address)
        with _console(namesrv.address, tmp_path) as console:
            message_page = _pages_with_the_cluster_up(browser, console, broker_a.address)
            broker_b.kill()
            _pages_with_broker_b_down(browser, console, message_page)
            v5.close()
            broker_a.kill()
            _pages_with_every_broker_down(browser, console, message_page)
    finally:
        broker_b.stop()
        broker_a.stop()


def _routed(client: RmqClient, topic: str) -> bool:
    try:
        return bool(client.query_route(topic).message_queues)
    except RmqError:
        return False


def _pages_with_the_cluster_up(browser: Any, console: str, broker_a: str) -> str:
    """Every page with both brokers up; the address of the message page it visited."""
    browser.goto(console + "/")
    brokers = browser.locator("#brokers tr").all_inner_texts()
    [row_a] = [row.split("\t") for row in brokers if row.startswith("broker-a")]
    # after the Epoch column ("-" outside controller mode): version, uptime, put / get today (six
    # orders and the timer message, stored into the timer topic until it is due; g1 pulled three)
    assert row_a[4] == "-" and row_a[8] == __version__ and row_a[10] == "7" and row_a[11] == "3", row_a
    # the charts (uPlot, served from /static): a legend entry per topic / group, refreshed each second
    browser.wait_for_selector("#tps-chart .u-legend >> text=Orders")
    browser.wait_for_selector("#lag-chart .u-legend >> text=g1")
    browser.wait_for_selector("#consume-chart .u-legend >> text=g1")
    assert browser.locator("#tps-chart .u-axis").count() >= 2                  # a time axis and a value axis
    _shot(browser, "cluster")
    browser.click("#pause-charts")
    assert browser.get_attribute("#charts", "data-paused") == "yes"
    assert browser.inner_text("#chart-status") == "paused" and browser.inner_text("#pause-charts") == "Resume"
    browser.goto(console + "/topics")
    assert "Orders" in browser.inner_text("#topics")
    _shot(browser, "topics")
    assert "Timers pending" in browser.inner_text("#topics")
    browser.click("#topics >> text=Orders")
    assert "g1" in browser.inner_text("#consumers") and "read-write" in browser.inner_text("#route")
    assert browser.inner_text("#timers") == "1"                    # the timer waiting for Orders
    browser.wait_for_selector("#tps-chart .u-legend >> text=Orders")        # this topic's TPS only
    assert browser.locator("#tps-chart .u-legend >> text=Payments").count() == 0
    _shot(browser, "topic")
    browser.goto(console + "/messages?topic=Orders&key=k4")
    keys = [row.split("\t")[5] for row in browser.locator("#messages tr").all_inner_texts()[1:]]
    assert keys == ["k4 shared"], keys                            # not "<built-in method keys ...>"
    browser.goto(console + "/messages?topic=Orders")
    assert "k0 shared" in browser.inner_text("#messages") and "built-in" not in browser.content()
    _shot(browser, "messages")
    browser.goto(console + "/groups")
    groups = browser.inner_text("#groups")
    assert "g1" in groups and "v5-group" in groups
    _shot(browser, "groups")
    browser.click("#groups >> text=v5-group")
    assert "v5-client" in browser.inner_text("#members")
    browser.goto(console + "/groups/g1")
    assert browser.inner_text("#consumed") == "3" and browser.inner_text("#last-consume") != "never"
    browser.wait_for_selector("#consume-chart .u-legend >> text=g1")
    _shot(browser, "group")
    _follow(browser, "text=dead letters: 3", "**/dlq/g1")
    assert len(browser.locator("#dead-letters input[name=msg_id]").all()) == 3
    browser.check("#select-all")
    browser.select_option("#resend select", "group")
    browser.once("dialog", lambda dialog: dialog.accept())
    browser.click("#resend button")      # answered with /dlq/g1 again, now marking what was resent
    sync_api.expect(browser.locator("#dead-letters td.resent", has_text="resent at")).to_have_count(3)
    _shot(browser, "dlq")
    with RmqClient(broker_a) as client:      # the track finds the resent copy by key: indexed once dispatched
        retry_topic = retry.retry_topic("g1")
        wait_until(lambda: b"order 1" in client.query_message_by_key(retry_topic, "broker-a", "k1").records,
                   "the resent copy of order 1 in broker-a's index")
    browser.goto(console + "/messages?topic=Orders&key=k1")          # "order 1": dead-lettered, then resent
    _follow(browser, "#messages a", MESSAGE_PAGE)
    track = browser.locator("#track tr").all_inner_texts()[1:]
    rows = [row.split("\t") for row in track if row.startswith("g1")]
    assert len(rows) == 1, browser.inner_text("main")
    [g1] = rows
    assert g1[1] == "in the DLQ" and g1[2] != "-" and g1[3] != "-", g1       # a retry copy and a dead letter
    _shot(browser, "message")
    message_page = str(browser.url)
    browser.goto(console + "/acl")                 # brokers without --acl say so
    assert "runs without --acl" in browser.inner_text("#acl-broker-a")
    browser.goto(console + "/sign-in")
    _shot(browser, "sign-in")
    return message_page


def _pages_with_broker_b_down(browser: Any, console: str, message_page: str) -> None:
    for path, table in [("/", "#brokers"), ("/topics", "#topics"), ("/groups", "#groups"),
                        ("/groups/g1", "#progress"), ("/dlq/g1", "#dead-letters"), ("/acl", "#acl-broker-a")]:
        response = browser.goto(console + path)
        assert response is not None and response.status == 200, path
        assert "could not reach broker-b" in browser.inner_text("#incomplete"), path
        assert browser.locator(table).count() == 1, path
    for page, table in [(console + "/topics/Orders", "#queues"),           # nothing of these on broker-b
                        (console + "/messages?topic=Orders", "#messages"), (message_page, "#track"),
                        (console + "/sign-in", "form")]:
        response = browser.goto(page)
        assert response is not None and response.status == 200, page
        assert browser.locator(table).count() >= 1, page
    response = browser.goto(console + "/topics/Payments")          # only on broker-b: nothing to read
    assert response is not None and response.status == 503 and "broker-b" in browser.inner_text("#error")
    browser.goto(console + "/dlq/g1")
    assert len(browser.locator("#dead-letters input[name=msg_id]").all()) == 3     # broker-a's, listed
    browser.goto(console + "/topics")
    assert "incomplete" in browser.inner_text("#topics")            # Payments' figures
    _shot(browser, "topics-incomplete")


def _pages_with_every_broker_down(browser: Any, console: str, message_page: str) -> None:
    for page in [console + path for path in ["/", "/topics", "/topics/Orders", "/groups", "/groups/g1",
                                             "/dlq/g1", "/messages?topic=Orders", "/acl"]] + [message_page]:
        response = browser.goto(page)
        assert response is not None and response.status == 503, page
        said = browser.inner_text("#error")
        assert "broker-a" in said and "no dead letter" not in browser.content(), (page, said)
    _shot(browser, "unreachable")


ACL = """accounts:
  - {accessKey: adminaccount, secretKey: admin-secret-key, admin: true}
  - {accessKey: ordersreader, secretKey: orders-secret-key, topicPerms: ['Orders=SUB'],
     groupPerms: ['readers=SUB'], whiteRemoteAddress: 127.0.0.1}
"""


def test_an_admin_reads_the_acl_and_a_reader_is_refused(tmp_path: Path, browser: Any) -> None:
    """#46: the ACL page shows an admin every account's permissions and no secret key; a reader
    signed in gets a 403 page saying why; with the broker (the console's only endpoint) down the
    page is a 503 naming its address."""
    server = processes.broker(tmp_path, extra=["--acl", str(write_acl(tmp_path / "acl.yml", ACL))]).start()
    try:
        with _console(server.address, tmp_path) as console:
            _sign_in(browser, console, "ordersreader", "orders-secret-key")
            response = browser.goto(console + "/acl")
            assert response is not None and response.status == 403
            assert "NO_PERMISSION" in browser.inner_text("#error")
            _sign_in(browser, console, "adminaccount", "admin-secret-key")
            response = browser.goto(console + "/acl")
            assert response is not None and response.status == 200
            rows = [row.split("\t") for row in browser.locator("#acl-broker-a tr").all_inner_texts()[1:]]
            assert ["ordersreader", "no", "DENY", "DENY", "Orders=SUB", "readers=SUB", "127.0.0.1", "-"] in [
                [cell.strip() for cell in row] for row in rows], rows
            assert "secret-key" not in browser.content()
            _shot(browser, "acl")
            server.kill()
            response = browser.goto(console + "/acl")
            assert response is not None and response.status == 503   # the endpoint is the broker: named
            assert server.address in browser.inner_text("#error")
    finally:
        server.stop()


def _sign_in(browser: Any, console: str, access_key: str, secret_key: str) -> None:
    browser.goto(console + "/sign-in")
    browser.fill("input[name=access_key]", access_key)
    browser.fill("input[name=secret_key]", secret_key)
    browser.click("form[action='/sign-in'] button")
    sync_api.expect(browser.locator("header")).to_contain_text(f"signed in as {access_key}")


@pytest.mark.skipif(etcd_missing() is not None, reason=etcd_missing() or "")
def test_the_cluster_page_shows_the_leading_controller_and_a_dead_old_master_as_down(
        tmp_path: Path, browser: Any) -> None:
    """Issue 44: two controllers on a three-member etcd and a SYNC_MASTER pair. The cluster page
    names the leading controller, each group's epoch, master and SyncStateSet; after the leading
    controller and the master are killed, it names the other controller, epoch 2 with the slave as
    master, and shows the dead old master as down, not as SYNC_MASTER."""
    with etcd_controlled_group(tmp_path) as group, _console(group.endpoints, tmp_path) as console:
        with ThreadPoolExecutor(1) as thread:   # etcd's asyncio client, beside Playwright's event loop
            leader = thread.submit(group.leader).result()
        browser.goto(console + "/")
        assert browser.inner_text("#leading-controller") == leader.address
        assert _cells(browser, "#controlled-groups") == [[GROUP, "1", "0", "0, 1"]]
        assert [row[:5] for row in _cells(browser, "#brokers")] == [
            [GROUP, "0", group.members[0].address, "SYNC_MASTER", "1"],
            [GROUP, "1", group.members[1].address, "SLAVE", "1"]]
        _shot(browser, "cluster-controller")
        leader.kill()
        group.members[0].kill()
        wait(lambda: controller_status(group.members[1]).role == rmq_pb2.SYNC_MASTER, "the slave elected")
        browser.goto(console + "/")
        assert browser.inner_text("#leading-controller") == next(
            c.address for c in group.controllers if c is not leader)
        assert _cells(browser, "#controlled-groups") == [[GROUP, "2", "1", "1"]]
        assert [row[:5] for row in _cells(browser, "#brokers")] == [
            [GROUP, "0", group.members[0].address, "down (registered as SYNC_MASTER)", "-"],
            [GROUP, "1", group.members[1].address, "SYNC_MASTER", "2"]]


def _cells(browser: Any, table: str) -> list[list[str]]:
    """The table's rows below its header, each as its cells' texts."""
    rows = browser.locator(f"{table} tr").all_inner_texts()[1:]
    return [[cell.strip() for cell in row.split("\t")] for row in rows]
