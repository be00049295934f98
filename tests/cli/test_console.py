"""The web console over HTTP (Starlette's test client) against an in-process broker: every page
renders, its JSON twin agrees with MQAdmin and `rmq group progress`, unknown names are 404 pages
saying so, forms need the session's CSRF token, a resend from the DLQ page arrives, and charts
are bounded."""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from httpx2 import Response
from starlette.testclient import TestClient

from rmq import __version__, retry
from rmq.auth import ClientSecurity
from rmq.broker_server.security.acl_file import AclFile
from rmq.broker_server.security.server_security import ServerSecurity
from rmq.cli import main as cli
from rmq.cli.console import ConsoleSettings, History, Sample, create_app
from rmq.cli.console.app import COOKIE, MAX_ANONYMOUS_SESSIONS
from rmq.cli.console.cluster_view import ClusterView
from rmq.cli.console.history import MAX_SERIES
from rmq.cli.output import timestamp
from rmq.connector.admin import MQAdmin
from rmq.connector.client import MessageQueue, OutgoingMessage, RmqClient
from rmq.remoting.remoting_command import LanguageCode, RemotingCommand
from rmq.remoting.request_code import RequestCode
from rmq.rocketmq_v2 import definition_pb2 as v2
from rmq.statuses import PullStatus
from tests.acl_files import write_acl
from tests.broker_server.in_process_broker import InProcessBroker, running_broker
from tests.broker_server.remoting_client import RemotingTestClient
from tests.broker_server.v2_calls import TelemetryStream, V2Client
from tests.waiting import wait_until

BASE = "http://127.0.0.1"      # a Host the console answers (it refuses others: DNS rebinding)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    with running_broker(tmp_path) as server:
        with RmqClient(server.address) as client:
            client.create_topic("Orders", queues=2)
            client.send("Orders", [OutgoingMessage(f"order {i}".encode(), keys=f"k{i}", queue_id=i % 2)
                                   for i in range(6)])
            client.heartbeat("client-a", "g1", {"Orders": "*"})
            client.update_consumer_offsets("g1", {MessageQueue("Orders", "broker-a", 0): 1})
        yield server


@pytest.fixture
def web(broker: InProcessBroker) -> Iterator[TestClient]:
    with TestClient(create_app(ConsoleSettings(broker.address)), base_url=BASE) as client:
        yield client


def csrf(page: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', page)
    assert match, "the page has no form"
    return match.group(1)


def test_every_page_renders(web: TestClient) -> None:
    for path, expected in [("/", "broker-a"), ("/topics", "Orders"), ("/topics/Orders", "Topic Orders"),
                           ("/groups", "g1"), ("/groups/g1", "client-a"),
                           ("/messages?topic=Orders", "order 3"),
                           ("/messages?topic=Orders&key=k4", "order 4"), ("/dlq/g1", "no dead letter"),
                           ("/sign-in", "Access key")]:
        page = web.get(path)
        assert page.status_code == 200, path
        assert expected in page.text, path


def test_the_group_page_and_api_agree_with_mqadmin(web: TestClient, broker: InProcessBroker) -> None:
    with RmqClient(broker.address) as client:
        progress = MQAdmin(client).progress("g1")
    api = web.get("/api/groups/g1").json()
    assert api["total_lag"] == progress.total_lag == 5
    assert {(q["topic"], q["queue_id"]): q["lag"] for q in api["queues"]} == {
        (q.queue.topic, q.queue.queue_id): q.lag for q in progress.queues}
    assert [m["client_id"] for m in api["members"]] == ["client-a"]
    assert f'id="total-lag">{progress.total_lag}<' in web.get("/groups/g1").text


@pytest.mark.parametrize("path, says", [
    ("/topics/Nope", "topic Nope does not exist"), ("/groups/nobody", "consumer group nobody does not exist"),
    ("/messages/0A0000010000270F0000000000000000", "not in this cluster"),
    ("/messages/xyz", "is not a message id"), ("/dlq/nobody", "consumer group nobody does not exist"),
    ("/messages?topic=Nope", "topic Nope does not exist"),
])
def test_unknown_names_are_404_pages_saying_so(web: TestClient, path: str, says: str) -> None:
    page = web.get(path)
    assert page.status_code == 404 and says in page.text
    api = web.get("/api" + path)
    assert api.status_code == 404 and says in api.json()["error"]


def test_bad_query_values_are_400(web: TestClient) -> None:
    page = web.get("/topics?page=minus")
    assert page.status_code == 400 and "page must be a whole number" in page.text


def test_a_message_page_shows_body_properties_and_consume_state(web: TestClient) -> None:
    listed = web.get("/api/messages?topic=Orders&key=k0").json()["messages"]
    page = web.get(f"/api/messages/{listed[0]['msg_id']}").json()
    assert page["body"] == "order 0" and page["keys"] == "k0"
    assert page["track"] == [{"group": "g1", "consumed": True, "state": "consumed", "retries": [],
                              "dead_letters": []}]                        # queue 0, offset 0 < committed 1


def test_a_message_track_follows_it_into_the_dlq_and_resends_it_to_one_group(web: TestClient,
                                                                            broker: InProcessBroker) -> None:
    """The message page's track: per group consumed or not, its copies in the group's DLQ and retry
    topic; "Resend to g1" delivers it again to g1's retry topic only."""
    with RmqClient(broker.address) as client:
        client.send_message_back("g1", "broker-a", 0, delay_level=-1)      # "order 0" to %DLQ%g1
    original = web.get("/api/messages?topic=Orders&key=k0").json()["messages"][0]["msg_id"]
    page = web.get(f"/messages/{original}").text
    [track] = web.get(f"/api/messages/{original}").json()["track"]
    assert track["state"] == "in the DLQ" and len(track["dead_letters"]) == 1 and track["retries"] == []
    assert track["dead_letters"][0] in page
    resent = web.post(f"/messages/{original}/resend", data={"group": "g1", "csrf": csrf(page)})
    assert resent.status_code == 200
    [track] = web.get(f"/api/messages/{original}").json()["track"]
    assert len(track["retries"]) == 1


def test_forms_need_the_sessions_csrf_token(web: TestClient, broker: InProcessBroker) -> None:
    refused = web.post("/topics", data={"topic": "Evil", "queues": "1", "csrf": "forged"})
    assert refused.status_code == 403
    form = {"topic": "Fresh", "queues": "3", "csrf": csrf(web.get("/topics").text)}
    created = web.post("/topics", data=form)
    assert created.status_code == 200 and "Topic Fresh" in created.text
    with RmqClient(broker.address) as client:
        assert len(client.route("Fresh").message_queues) == 3
        assert "Evil" not in {t.topic_name for t in client.list_topics()}


def test_reset_from_the_group_page(web: TestClient, broker: InProcessBroker) -> None:
    form = {"topic": "Orders", "to": "latest", "csrf": csrf(web.get("/groups/g1").text)}
    refused = web.post("/groups/g1/reset", data=form)
    assert refused.status_code == 400 and "live member" in refused.text
    reset = web.post("/groups/g1/reset", data=form | {"force": "on"})
    assert reset.status_code == 200
    with RmqClient(broker.address) as client:
        assert client.query_consumer_offsets("g1", "Orders")[MessageQueue("Orders", "broker-a", 0)] == 3


def test_a_resend_from_the_dlq_page_arrives(web: TestClient, broker: InProcessBroker) -> None:
    with RmqClient(broker.address) as client:
        client.send_message_back("g1", "broker-a", 0, delay_level=-1)      # "order 0" to %DLQ%g1
        page = web.get("/dlq/g1").text
        assert "order 0" in page
        dead = re.search(r'name="msg_id" value="([0-9A-F]+)"', page)
        assert dead
        sent = web.post("/dlq/g1/resend", data={"msg_id": dead.group(1), "to": "group", "csrf": csrf(page)})
        assert sent.status_code == 200
        retry_queue = client.route(retry.retry_topic("g1")).message_queues[0]
        result = client.browse_messages(retry_queue, 0, 10)
    assert result.pull_status == PullStatus.FOUND and b"order 0" in result.messages.records


def test_signing_in_with_a_bad_pair_is_one_clear_line(web: TestClient) -> None:
    form = {"access_key": "ak", "secret_key": "", "csrf": csrf(web.get("/sign-in").text)}
    page = web.post("/sign-in", data=form)
    assert page.status_code == 400 and "give both or neither" in page.text


def test_charts_are_bounded_and_compute_rates() -> None:
    now = [1000.0]
    samples = iter([Sample({"t": 100}, {"g": 5}), Sample({"t": 160}, {"g": 2})])
    history = History(lambda: next(samples), clock=lambda: now[0])
    history.tick()
    now[0] += 10
    history.tick()
    snapshot = history.snapshot()
    assert snapshot["tps"] == {"t": [(1010.0, 6.0)]} and snapshot["lag"]["g"] == [(1000.0, 5), (1010.0, 2)]
    many = History(lambda: Sample({f"t{i}": i for i in range(MAX_SERIES + 5)}, {}), clock=lambda: now[0])
    many.tick()
    now[0] += 10
    many.tick()
    assert len(many.snapshot()["tps"]) == MAX_SERIES


ADMIN = {"access_key": "adminaccount", "secret_key": "admin-secret-key"}
READER = {"access_key": "ordersreader", "secret_key": "orders-secret-key"}


@pytest.fixture
def acl_broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    """An --acl broker holding Orders and Payroll; ordersreader may only read Orders."""
    acl = write_acl(tmp_path / "acl.yml", "accounts:\n"
                    "  - {accessKey: adminaccount, secretKey: admin-secret-key, admin: true}\n"
                    "  - {accessKey: ordersreader, secretKey: orders-secret-key,"
                    " topicPerms: ['Orders=SUB'], groupPerms: ['readers=SUB']}\n")
    broker = InProcessBroker(tmp_path / "store", ServerSecurity(acl_file=AclFile(acl))).start()
    try:
        with RmqClient(broker.address, **ADMIN) as admin:
            admin.create_topic("Orders", queues=1)
            admin.create_topic("Payroll", queues=1)
        yield broker
    finally:
        broker.stop()


def sign_in(web: TestClient, account: dict[str, str]) -> Response:
    return web.post("/sign-in", data=account | {"csrf": csrf(web.get("/sign-in").text)})


def test_a_signed_in_account_sees_only_what_it_may(acl_broker: InProcessBroker) -> None:
    """On an --acl cluster an anonymous visitor is asked to sign in; a signed-in account sees only
    the topics it may read, and a page of another topic is refused (403) saying so."""
    with TestClient(create_app(ConsoleSettings(acl_broker.address)), base_url=BASE) as web:
        anonymous = web.get("/topics")
        assert anonymous.status_code == 403 and "Sign in" in anonymous.text
        assert "signed in as" in sign_in(web, READER).text
        assert [t["topic"] for t in web.get("/api/topics").json()["topics"]] == ["Orders"]
        refused = web.get("/topics/Payroll")
        assert refused.status_code == 403 and "NO_PERMISSION" in refused.text


def test_other_host_names_are_refused_and_visitors_do_not_act_as_the_console(
        acl_broker: InProcessBroker) -> None:
    """SECURITY #39 finding 10: a DNS-rebound page (Host evil.example) gets nothing, and a visitor
    who did not sign in is not the console's own (admin) identity: creating a topic is refused."""
    settings = ConsoleSettings(acl_broker.address, ClientSecurity(**ADMIN))
    with TestClient(create_app(settings), base_url="http://evil.example:8780") as rebound:
        assert rebound.get("/topics").status_code == 400
    with TestClient(create_app(settings), base_url=BASE) as web:
        form = {"topic": "Evil", "queues": "1", "csrf": csrf(web.get("/sign-in").text)}
        refused = web.post("/topics", data=form)
        assert refused.status_code == 400 and "UNAUTHENTICATED" in refused.text
    with RmqClient(acl_broker.address, **ADMIN) as admin:
        assert "Evil" not in {t.topic_name for t in admin.list_topics()}


def test_charts_show_only_what_the_account_may_see(acl_broker: InProcessBroker) -> None:
    """SECURITY #39 finding 15: the charts are sampled as the console's admin identity; a signed-in
    reader sees Orders' series and its own group's, not Payroll's nor another group's."""
    now = [1000.0]
    samples = iter([Sample({"Orders": 1, "Payroll": 1}, {"readers": 1, "payroll-team": 1},
                           {"readers": 0, "payroll-team": 0}),
                    Sample({"Orders": 5, "Payroll": 9}, {"readers": 0, "payroll-team": 3},
                           {"readers": 20, "payroll-team": 30})])
    history = History(lambda: next(samples), clock=lambda: now[0])
    history.tick()
    now[0] += 10
    history.tick()
    with RmqClient(acl_broker.address, **ADMIN) as admin:
        for group in ("readers", "payroll-team"):
            admin.update_consumer_offsets(group, {MessageQueue("Orders", "broker-a", 0): 0})
    settings = ConsoleSettings(acl_broker.address, ClientSecurity(**ADMIN))
    with TestClient(create_app(settings, history), base_url=BASE) as web:
        assert web.get("/api/charts").json()["tps"] == {}          # not signed in: nothing
        sign_in(web, READER)
        charts = web.get("/api/charts").json()      # what the cluster page's charts draw
        assert set(charts["tps"]) == {"Orders"} and set(charts["lag"]) == {"readers"}
        assert charts["consume"] == {"readers": [[1010.0, 2.0]]}


def test_cookieless_requests_do_not_sign_anyone_out(acl_broker: InProcessBroker) -> None:
    """SECURITY #39 finding 16: more cookieless visits than the anonymous sessions' bound evict
    only anonymous sessions; the signed-in session stays signed in."""
    with TestClient(create_app(ConsoleSettings(acl_broker.address)), base_url=BASE) as web:
        sign_in(web, READER)
        signed_in = web.cookies[COOKIE]
        for _ in range(MAX_ANONYMOUS_SESSIONS + 44):
            web.cookies.clear()
            web.get("/sign-in")
        web.cookies.clear()
        web.cookies[COOKIE] = signed_in
        assert "signed in as" in web.get("/sign-in").text


def test_a_wrong_secret_key_does_not_sign_in(acl_broker: InProcessBroker) -> None:
    """SECURITY #39 finding 17: the cluster checks the pair before the console says "signed in"."""
    with TestClient(create_app(ConsoleSettings(acl_broker.address)), base_url=BASE) as web:
        refused = sign_in(web, READER | {"secret_key": "not-the-secret"})
        assert refused.status_code == 403 and "wrong access key or secret key" in refused.text
        assert "signed in as" not in refused.text and "signed in as" not in web.get("/sign-in").text


def test_rocketmq5_consumer_groups_are_listed_everywhere(broker: InProcessBroker, web: TestClient,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """#46 defect 3: a RocketMQ 5 SimpleConsumer's group (a Telemetry session, no %RETRY% topic,
    no heartbeat) is in MQAdmin.groups, `rmq group list` and the console's group list and page."""
    settings = v2.Settings(client_type=v2.SIMPLE_CONSUMER, subscription=v2.Subscription(
        group=v2.Resource(name="v5-group"),
        subscriptions=[v2.SubscriptionEntry(topic=v2.Resource(name="Orders"),
                                            expression=v2.FilterExpression(expression="*"))]))
    with grpc.insecure_channel(broker.address) as channel:
        stream = TelemetryStream(V2Client(channel, "v5-client"), settings)
        try:
            assert stream.next().status.code == v2.OK
            with RmqClient(broker.address) as client:
                assert MQAdmin(client).groups() == ["g1", "v5-group"]
            assert cli.main(["group", "list", "--endpoints", broker.address]) == 0
            assert "v5-group" in capsys.readouterr().out
            assert "v5-group" in web.get("/groups").text
            page = web.get("/groups/v5-group")
            assert page.status_code == 200 and "v5-client" in page.text
            received = V2Client(channel, "v5-client").receive("v5-group", "Orders")
            assert web.get("/api/groups/v5-group").json()["consumed"] == len(received) > 0   # its pops count
        finally:
            stream.close()


def test_the_charting_library_is_vendored_with_its_licence(web: TestClient) -> None:
    """The charts' uPlot is served from /static (files as npm ships them, with the MIT licence);
    no template loads a script or stylesheet from elsewhere (no CDN)."""
    vendored = Path(__file__).parents[2] / "cli" / "console" / "static" / "vendor" / "uplot"
    table = (vendored / "VENDORED.md").read_text()
    recorded = dict(re.findall(r"^\| (\S+) \| ([0-9a-f]{64}) \|$", table, re.M))
    assert set(recorded) == {"uPlot.iife.min.js", "uPlot.min.css"}
    for name, digest in recorded.items():
        assert hashlib.sha256((vendored / name).read_bytes()).hexdigest() == digest, name
        assert web.get(f"/static/vendor/uplot/{name}").status_code == 200
    assert "MIT License" in (vendored / "LICENSE").read_text()
    templates = Path(__file__).parents[2] / "cli" / "console" / "templates"
    for template in templates.glob("*.html"):
        assert not re.search(r"""(src|href)=["']?(https?:)?//""", template.read_text()), template.name


def test_the_topic_page_names_its_groups_and_changes_permission_sends_and_deletes(
        web: TestClient, broker: InProcessBroker) -> None:
    """The topic page: the groups consuming it, its route, and the maintenance forms (read-only
    refuses sends until read-write again; a test message arrives; delete removes the topic)."""
    page = web.get("/topics/Orders").text
    assert "g1" in web.get("/api/topics/Orders").json()["groups"]
    assert [r["perm"] for r in web.get("/api/topics/Orders").json()["route"]] == ["read-write"]
    token = csrf(page)
    assert web.post("/topics/Orders/permission", data={"perm": "read-only", "csrf": token}).status_code == 200
    assert [r["perm"] for r in web.get("/api/topics/Orders").json()["route"]] == ["read-only"]
    refused = web.post("/topics/Orders/send", data={"body": "probe", "csrf": token})
    assert refused.status_code == 400 and "NO_PERMISSION" in refused.text
    web.post("/topics/Orders/permission", data={"perm": "read-write", "csrf": token})
    sent = web.post("/topics/Orders/send", data={"body": "probe", "keys": "probe-key", "csrf": token})
    assert sent.status_code == 200 and "probe" in web.get("/messages?topic=Orders&key=probe-key").text
    bad = web.post("/topics/Orders/permission", data={"perm": "everything", "csrf": token})
    assert bad.status_code == 400 and "permission must be one of" in bad.text
    assert web.post("/topics/Orders/delete", data={"csrf": token}).status_code == 200
    assert web.get("/topics/Orders").status_code == 404


def test_the_cluster_page_shows_each_brokers_version_uptime_and_todays_counts(
        web: TestClient, broker: InProcessBroker) -> None:
    """#46: RocketMQ Dashboard's broker table: version, uptime, today's put and get counts (the
    fixture stored 6 messages; a pull of g1 took 3; an admin's browse is no consumer's get)."""
    with RmqClient(broker.address) as client:
        client.pull(MessageQueue("Orders", "broker-a", 0), 0, 32, group="g1")
        client.browse_messages(MessageQueue("Orders", "broker-a", 1), 0, 32)
    [member] = web.get("/api/cluster").json()["brokers"][0]["members"]
    assert (member["version"], member["put_today"], member["get_today"]) == (__version__, 6, 3)
    assert member["uptime"].endswith("s") and member["boot_timestamp"] <= time.time() * 1000
    row = web.get("/").text
    assert f"<td>{__version__}</td>" in row and '<td class="num">6</td><td class="num">3</td>' in row


def test_the_group_page_shows_what_its_consumers_took_and_when_last(web: TestClient,
                                                                   broker: InProcessBroker) -> None:
    """#46: a group's consumed count and last consume time come from the brokers' per-group pull
    counters; a group that never pulled says "never"."""
    assert web.get("/api/groups/g1").json()["last_consume_ms"] == 0
    assert 'id="last-consume">never<' in web.get("/groups/g1").text
    before = int(time.time() * 1000)
    with RmqClient(broker.address) as client:
        client.pull(MessageQueue("Orders", "broker-a", 1), 0, 2, group="g1")
    api = web.get("/api/groups/g1").json()
    assert api["consumed"] == 2 and before <= api["last_consume_ms"] <= time.time() * 1000
    assert f'id="last-consume">{timestamp(api["last_consume_ms"])}<' in web.get("/groups/g1").text


def test_the_consume_chart_is_each_groups_pulled_messages_per_second(broker: InProcessBroker) -> None:
    """The charts' sampler reads the brokers' per-group counters: consume TPS is their change."""
    now = [1000.0]
    with RmqClient(broker.address) as client:
        history = History(ClusterView(client).sample, clock=lambda: now[0])
        history.tick()
        client.pull(MessageQueue("Orders", "broker-a", 0), 0, 32, group="g1")
        now[0] += 2
        history.tick()
    assert history.snapshot()["consume"]["g1"] == [(1002.0, 1.5)]


def test_the_acl_page_shows_accounts_and_permissions_to_admins_only(acl_broker: InProcessBroker) -> None:
    """#46: admins read every account's permissions (never a secret key); a reader and a visitor
    who did not sign in are refused (403)."""
    with TestClient(create_app(ConsoleSettings(acl_broker.address)), base_url=BASE) as web:
        assert web.get("/acl").status_code == 403
        sign_in(web, READER)
        refused = web.get("/acl")
        assert refused.status_code == 403 and "NO_PERMISSION" in refused.text
        sign_in(web, ADMIN)
        page = web.get("/acl")
        assert page.status_code == 200
        [broker] = web.get("/api/acl").json()["brokers"]
        reader = {a["access_key"]: a for a in broker["accounts"]}["ordersreader"]
        assert (reader["admin"], reader["topic_perms"], reader["group_perms"]) == (False, {"Orders": "SUB"},
                                                                                   {"readers": "SUB"})
        assert "Orders=SUB" in page.text and "ordersreader" in page.text
        for secret in ("orders-secret-key", "admin-secret-key"):
            assert secret not in page.text and secret not in str(broker)


def test_without_an_acl_the_acl_page_says_every_caller_is_trusted(web: TestClient) -> None:
    page = web.get("/acl")
    assert page.status_code == 200 and "runs without <code>--acl</code>" in page.text


def test_the_group_page_shows_producers_running_info_and_changes_settings(web: TestClient,
                                                                         broker: InProcessBroker) -> None:
    heartbeat = {"clientID": "cpp-producer@1", "producerDataSet": [{"groupName": "pg"}],
                 "consumerDataSet": []}
    with RemotingTestClient(broker.config.remoting_listen) as producer:
        producer.call(RemotingCommand(RequestCode.HEART_BEAT, language=LanguageCode.CPP, version=413,
                                      body=json.dumps(heartbeat).encode()))
        api = web.get("/api/groups/g1?producers=pg").json()
        assert [(p["client_id"], p["language"], p["version"]) for p in api["producers"]] == [
            ("cpp-producer@1", "CPP", 413)]
        assert "cpp-producer@1" in web.get("/groups/g1?producers=pg").text
    # client-a only heartbeats (no membership watch): named, not asked
    assert [(r["client_id"], "not online" in r["error"]) for r in api["running"]] == [("client-a", True)]
    form = {"retry_max_times": "3", "csrf": csrf(web.get("/groups/g1").text)}     # consume_enable unchecked
    assert web.post("/groups/g1/settings", data=form).status_code == 200
    assert web.get("/api/groups/g1").json()["settings"] == [
        {"broker_name": "broker-a", "consume_enable": False, "retry_max_times": 3, "stored": True}]
    refused = web.post("/groups/g1/settings", data=form | {"retry_max_times": "1001"})
    assert refused.status_code == 400 and "retry_max_times must be 0-1000" in refused.text


def test_the_topics_list_and_the_topic_page_show_its_pending_timers(
        web: TestClient, broker: InProcessBroker) -> None:
    """Timer messages waiting for a topic (counted per real topic in the TimerLog) on the topics
    list and the topic page; a recalled one no longer counts."""
    with RmqClient(broker.address) as client:
        sent = client.send("Orders", [OutgoingMessage(b"later", properties={"TIMER_DELAY_SEC": "600"})
                                      for _ in range(3)])
        wait_until(lambda: web.get("/api/topics/Orders").json()["timers"] == 3, "3 timers pending on Orders")
        client.recall_message(sent.recall_handles[0])
    assert web.get("/api/topics/Orders").json()["timers"] == 2
    assert 'id="timers">2<' in web.get("/topics/Orders").text
    listed = {t["topic"]: t["timers"] for t in web.get("/api/topics").json()["topics"]}
    assert listed["Orders"] == 2
    assert '<td class="num">2</td></tr>' in web.get("/topics").text
