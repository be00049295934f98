"""`rmq console` as a person uses it: a real broker process, the real `rmq console` process, and
headless Chromium (Debian's, driven by Playwright) clicking through it. The group page's numbers
match `rmq group progress --json`; a dead letter resent from the DLQ page arrives; an unknown
topic is a 404 page saying so."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rmq import retry
from rmq.connector.client import MessageQueue, OutgoingMessage, RmqClient
from rmq.statuses import PullStatus
from testing import processes

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
sync_api = pytest.importorskip("playwright.sync_api",
                               reason="playwright is not installed (pip install '.[test]')")


@pytest.fixture
def console(broker: processes.ServerProcess, tmp_path: Path) -> Iterator[str]:
    listen = f"127.0.0.1:{processes.free_port()}"
    log = open(tmp_path / "console.log", "ab")
    command = [sys.executable, "-m", "rmq.cli", "console", "--endpoints", broker.address, "--listen", listen,
               "--chart-interval", "1"]
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    try:
        _wait_http(f"http://{listen}/api/cluster", process)
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


@pytest.fixture
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (make venv installs it as root)")
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            yield chromium.new_page()
        finally:
            chromium.close()


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
    browser.click("#groups >> text=g1")
    assert browser.inner_text("#total-lag") == str(progress["total_lag"])
    rows = browser.locator("#progress tr").all_inner_texts()[1:]
    shown = {(cells[0], int(cells[2])): int(cells[5]) for cells in (row.split("\t") for row in rows)}
    assert shown == {(q["topic"], q["queue_id"]): q["lag"] for q in progress["queues"]}
    assert "client-a" in browser.inner_text("#members")

    browser.click("text=dead letters: 1")
    assert "order 0" in browser.inner_text("#dead-letters")
    browser.select_option("#dead-letters select", "group")
    browser.click("#dead-letters button")
    with RmqClient(broker.address) as client:
        retry_queue = client.route(retry.retry_topic("g1")).message_queues[0]
        resent = client.browse_messages(retry_queue, 0, 10)
    assert resent.pull_status == PullStatus.FOUND and b"order 0" in resent.messages.records

    response = browser.goto(console + "/topics/Nope")
    assert response is not None and response.status == 404
    assert "topic Nope does not exist" in browser.inner_text("#error")
