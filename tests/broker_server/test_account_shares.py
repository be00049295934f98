"""Per-account shares of the broker's bounded tables (issue #25, weaknesses and item 7): one account
holding the whole long-polling hold table, or filling the consumer-offset table, no longer locks
the other accounts out. The account is the call's (rmq.broker_server.security.caller)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Iterator
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path
from typing import TypeVar

import grpc
import pytest

from rmq.auth import Credentials, open_channel
from rmq.broker_server.errors import BrokerError
from rmq.broker_server.long_polling.fair_shares import FairShares, ShareExceeded
from rmq.broker_server.long_polling.pull_request_hold_service import HoldTableFull, PullRequestHoldService
from rmq.broker_server.offsets.consumer_offset_manager import ConsumerOffsetManager, OffsetKey
from rmq.broker_server.processors.topic_config_manager import TopicConfig
from rmq.broker_server.security.acl_file import AclFile
from rmq.broker_server.security.caller import ANONYMOUS, Caller, run_as
from rmq.broker_server.security.refusal_log import DEFAULT_LINES_PER_INTERVAL
from rmq.broker_server.security.rocketmq_v2_auth import ALGORITHM, AUTHORIZATION, DATE_TIME, signature
from rmq.broker_server.security.server_security import ServerSecurity
from rmq.rocketmq_v2 import MessagingServiceStub
from rmq.rocketmq_v2 import definition_pb2 as v2
from rmq.rocketmq_v2 import service_pb2 as pb
from rmq.v1 import rmq_pb2, rmq_pb2_grpc
from tests.acl_files import write_acl
from tests.broker_server.in_process_broker import InProcessBroker
from tests.broker_server.store_fixture import running_store
from tests.broker_server.test_processors import Broker
from tests.waiting import wait_until, wait_until_async

T = TypeVar("T")


async def as_account(account: str, call: Awaitable[T]) -> T:
    run_as(Caller(account, lambda: pytest.fail("shares never consult the ACL")))  # this task only
    return await call


def test_a_full_hold_table_gives_each_account_its_share() -> None:
    """One account took all 300 held pulls; now a pull of an account holding fewer releases the
    largest holder's oldest pull (answered now, as at its timeout) and is held."""
    async def scenario() -> None:
        service = PullRequestHoldService(lambda topic, queue_id: 0, check_interval_ms=60000, max_held=4)
        service.start()
        hog = [asyncio.create_task(as_account("hog", service.suspend("T", q, 0, None, 60000)))
               for q in range(4)]
        await wait_until_async(lambda: service.held_count("hog") == 4, "the hog's four pulls held")
        with pytest.raises(HoldTableFull):        # the hog itself gets no more than the table
            await as_account("hog", service.suspend("T", 9, 0, None, 60000))
        polite = [asyncio.create_task(as_account("polite", service.suspend("U", q, 0, None, 60000)))
                  for q in range(2)]
        await asyncio.wait_for(asyncio.gather(*hog[:2]), 5)      # the hog's two oldest answered
        assert not any(task.done() for task in hog[2:] + polite)
        assert (service.held_count("hog"), service.held_count("polite"), service.held_count()) == (2, 2, 4)
        with pytest.raises(HoldTableFull):        # 2 and 2: an equal share, nobody is displaced
            await as_account("polite", service.suspend("U", 9, 0, None, 60000))
        with pytest.raises(HoldTableFull):
            await as_account("hog", service.suspend("T", 9, 0, None, 60000))
        third = asyncio.create_task(as_account("third", service.suspend("V", 0, 0, None, 60000)))
        await wait_until_async(lambda: service.held_count("third") == 1, "the third account's pull held")
        assert service.held_count() == 4
        assert sum(task.done() for task in hog[2:] + polite) == 1   # one of the two largest gave way
        service.shutdown()
        await asyncio.wait_for(asyncio.gather(*hog, *polite, third), 5)
        assert service.held_count() == 0

    asyncio.run(asyncio.wait_for(scenario(), 10))


def test_each_account_adds_consumer_offsets_up_to_its_share(tmp_path: Path) -> None:
    offsets = ConsumerOffsetManager(tmp_path, max_entries=5, max_entries_per_account=2)
    offsets.commit_client_offsets("hog", {OffsetKey("G", "T", q): 1 for q in range(2)})
    with pytest.raises(BrokerError, match=r"2 consumer offsets; 1 more would pass 2 "
                                           r"\(max_consumer_offsets_per_account\)") as refused:
        offsets.commit_client_offsets("hog", {OffsetKey("G", "T", 0): 5, OffsetKey("G", "T", 2): 1})
    assert refused.value.code == rmq_pb2.LIMIT_EXCEEDED
    assert offsets.query_offset("G", "T", 0) == 1                    # all or nothing
    offsets.commit_client_offsets("hog", {OffsetKey("G", "T", 0): 5})  # known entries always fit
    offsets.commit_client_offsets("other", {OffsetKey("H", "T", q): 1 for q in range(2)})
    offsets.remove_topic("T")                                        # room given back to both
    offsets.commit_client_offsets("hog", {OffsetKey("G", "U", q): 1 for q in range(2)})
    # without --acl (one ANONYMOUS account) only the total applies
    offsets.commit_client_offsets(ANONYMOUS, {OffsetKey("A", "U", q): 1 for q in range(3)})
    with pytest.raises(BrokerError, match=r"\(max_consumer_offsets\)"):
        offsets.commit_client_offsets("other", {OffsetKey("H", "U", 0): 1})
    assert offsets.size() == 5


# ------------------------------------------------- RocketMQ 5 commits on a whole broker (item 7)

@pytest.fixture
def broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    broker = InProcessBroker(tmp_path / "store", max_consumer_offsets=3).start()
    with grpc.insecure_channel(broker.address) as channel:
        config = rmq_pb2.TopicConfig(topic_name="T", read_queue_nums=2, write_queue_nums=2, perm=6)
        created = rmq_pb2_grpc.AdminServiceStub(channel).CreateTopic(
            rmq_pb2.CreateTopicRequest(config=config), timeout=10)
        assert created.status.code == rmq_pb2.OK
    yield broker
    broker.stop()


def test_rocketmq5_update_offset_and_pops_go_through_max_consumer_offsets(broker: InProcessBroker) -> None:
    """205,000 groups were stored through UpdateOffset and pops, after which every new commit on
    the broker was refused; now both are bounded like rmq.v1 commits."""
    def queue(queue_id: int) -> v2.MessageQueue:
        return v2.MessageQueue(topic=v2.Resource(name="T"), id=queue_id)

    def receive(stub: MessagingServiceStub, group: str) -> v2.Status:
        request = pb.ReceiveMessageRequest(
            group=v2.Resource(name=group), message_queue=queue(-1),
            filter_expression=v2.FilterExpression(type=v2.TAG, expression="*"), batch_size=1)
        return next(iter(stub.ReceiveMessage(request, timeout=10))).status

    def update(stub: MessagingServiceStub, group: str, queue_id: int) -> v2.Status:
        return stub.UpdateOffset(pb.UpdateOffsetRequest(
            group=v2.Resource(name=group), message_queue=queue(queue_id), offset=0), timeout=10).status

    with grpc.insecure_channel(broker.address) as channel:
        stub = MessagingServiceStub(channel)
        assert receive(stub, "popper").code == v2.MESSAGE_NOT_FOUND     # its two queues' offsets stored
        assert update(stub, "updater", 0).code == v2.OK
        refused = update(stub, "updater", 1)
        assert refused.code == v2.TOO_MANY_REQUESTS and "max_consumer_offsets" in refused.message
        refused = receive(stub, "popper2")
        assert refused.code == v2.TOO_MANY_REQUESTS and "max_consumer_offsets" in refused.message
        assert update(stub, "updater", 0).code == v2.OK                   # a known entry still moves
    assert broker.controller.offsets.size() == 3
    pops = broker.controller.rocketmq_v2.pop
    assert {queue.group for queue in pops._locks} == {"popper"}    # a refused pop holds nothing either


def test_a_refused_hold_ends_a_rocketmq5_receive_at_once(tmp_path: Path) -> None:
    """A receive that long-polls several queues holds one pull per queue; when the hold table
    refuses one (the account's share is used), the receive used to pop again at once, in a loop on
    the event loop, until its long-polling time was over."""
    broker = InProcessBroker(tmp_path / "store", max_held_pulls=1).start()
    try:
        with grpc.insecure_channel(broker.address) as channel:
            config = rmq_pb2.TopicConfig(topic_name="T", read_queue_nums=2, write_queue_nums=2, perm=6)
            assert rmq_pb2_grpc.AdminServiceStub(channel).CreateTopic(
                rmq_pb2.CreateTopicRequest(config=config), timeout=10).status.code == rmq_pb2.OK
            request = pb.ReceiveMessageRequest(
                group=v2.Resource(name="G"),
                message_queue=v2.MessageQueue(topic=v2.Resource(name="T"), id=-1),
                filter_expression=v2.FilterExpression(type=v2.TAG, expression="*"), batch_size=1)
            request.long_polling_timeout.FromSeconds(60)
            status = next(iter(MessagingServiceStub(channel).ReceiveMessage(request, timeout=30))).status
        assert status.code == v2.TOO_MANY_REQUESTS and "max_held_pulls" in status.message
    finally:
        broker.stop()


def test_held_pull_shares_follow_the_signed_account_on_an_acl_broker(tmp_path: Path) -> None:
    """End to end: the account the hold table counts is the one the call was signed with."""
    acl = write_acl(tmp_path / "acl.yml", "accounts:\n"
                    "  - {accessKey: hogaccount, secretKey: hog-secret-key, admin: true}\n"
                    "  - {accessKey: politeaccount, secretKey: polite-secret-key, admin: true}\n")
    broker = InProcessBroker(tmp_path / "store", ServerSecurity(acl_file=AclFile(acl)),
                             max_held_pulls=4).start()
    hold = broker.controller.hold_service
    hog_key = Credentials("hogaccount", "hog-secret-key")
    polite_key = Credentials("politeaccount", "polite-secret-key")
    try:
        with open_channel(broker.address, credentials=hog_key) as hog_channel, \
                open_channel(broker.address, credentials=polite_key) as polite_channel:
            config = rmq_pb2.TopicConfig(topic_name="T", read_queue_nums=8, write_queue_nums=8, perm=6)
            assert rmq_pb2_grpc.AdminServiceStub(hog_channel).CreateTopic(
                rmq_pb2.CreateTopicRequest(config=config), timeout=10).status.code == rmq_pb2.OK

            def held_pull(channel: grpc.Channel, queue_id: int) -> grpc.Future:
                request = rmq_pb2.PullMessageRequest(
                    consumer_group="G", topic="T", queue_id=queue_id, queue_offset=0, max_messages=1,
                    sys_flag=rmq_pb2.FLAG_SUSPEND, suspend_timeout_ms=60_000, sub_expression="*")
                return rmq_pb2_grpc.MessagingServiceStub(channel).PullMessage.future(request, timeout=90)

            hog = [held_pull(hog_channel, q) for q in range(4)]
            wait_until(lambda: hold.held_count("hogaccount") == 4, "the hog holds the whole table")
            polite = held_pull(polite_channel, 4)
            wait_until(lambda: hold.held_count("politeaccount") == 1, "the polite account's pull is held")
            wait_until(lambda: any(future.done() for future in hog), "one hog pull is answered")
            answered = [future.result() for future in hog if future.done()]   # its oldest gave way
            assert [(a.status.code, a.pull_status) for a in answered] == [(rmq_pb2.OK, rmq_pb2.NO_NEW_MSG)]
            assert not polite.done()
            assert (hold.held_count("hogaccount"), hold.held_count()) == (3, 4)
            for future in [*hog, polite]:
                future.cancel()
    finally:
        broker.stop()


def test_dropped_piggy_backed_commits_are_logged_at_a_bounded_rate(tmp_path: Path, caplog) -> None:
    """A client past its share of consumer offsets that pulls with FLAG_COMMIT_OFFSET logged one
    warning per pull; the drops now go to the rate-limited refusal log."""
    with running_store(tmp_path / "store") as store:
        broker = Broker(store, tmp_path)
        broker.topics.create(TopicConfig("T", 1, 1))
        broker.offsets.max_entries = 1
        caplog.set_level(logging.INFO)
        for n in range(3 * DEFAULT_LINES_PER_INTERVAL):
            response = asyncio.run(broker.pull.process(rmq_pb2.PullMessageRequest(
                consumer_group=f"group{n}", topic="T", queue_id=0, queue_offset=0, max_messages=1,
                sys_flag=rmq_pb2.FLAG_COMMIT_OFFSET, commit_offset=0)))
            assert response.status.code == rmq_pb2.OK           # the pull itself is answered
        broker.filters.shutdown()
        broker.executor.shutdown()
    assert broker.offsets.size() == 1
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == DEFAULT_LINES_PER_INTERVAL, lines
    assert all("PullMessage commit" in line and "max_consumer_offsets" in line for line in lines)


def test_fair_shares_displace_the_largest_holders_oldest_entry() -> None:
    shares: FairShares[str] = FairShares(3)
    assert [shares.admit("hog", entry) for entry in ("h1", "h2", "h3")] == [None, None, None]
    with pytest.raises(ShareExceeded):
        shares.admit("hog", "h4")
    assert shares.admit("b", "b1") == "h1"
    assert shares.admit("c", "c1") == "h2"
    with pytest.raises(ShareExceeded):           # 1, 1, 1: an equal share each
        shares.admit("b", "b2")
    assert not shares.remove("hog", "h1") and shares.remove("hog", "h3")
    assert shares.admit("b", "b2") is None and (shares.count("b"), shares.count()) == (2, 3)


def v2_metadata(credentials: Credentials) -> list[tuple[str, str]]:
    """A RocketMQ 5 client's MQv2-HMAC-SHA1 signature of the current time."""
    date_time = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return [(DATE_TIME, date_time),
            (AUTHORIZATION, f"{ALGORITHM} Credential={credentials.access_key}, SignedHeaders={DATE_TIME}, "
                            f"Signature={signature(credentials.secret_key, date_time)}")]


def test_held_rocketmq5_receives_are_shared_between_accounts(tmp_path: Path) -> None:
    """One account holding every receive slot (MAX_HELD_RECEIVES) answered everybody else
    TOO_MANY_REQUESTS; now its oldest held receive gives way to another account's."""
    acl = write_acl(tmp_path / "acl.yml", "accounts:\n"
                    "  - {accessKey: hogaccount, secretKey: hog-secret-key, admin: true}\n"
                    "  - {accessKey: politeaccount, secretKey: polite-secret-key, admin: true}\n")
    broker = InProcessBroker(tmp_path / "store", ServerSecurity(acl_file=AclFile(acl))).start()
    hog_key = Credentials("hogaccount", "hog-secret-key")
    polite_key = Credentials("politeaccount", "polite-secret-key")
    pops = broker.controller.rocketmq_v2.pop
    pops._held = FairShares(2)      # MAX_HELD_RECEIVES, made small
    try:
        with open_channel(broker.address, credentials=hog_key) as admin_channel:
            config = rmq_pb2.TopicConfig(topic_name="T", read_queue_nums=1, write_queue_nums=1, perm=6)
            assert rmq_pb2_grpc.AdminServiceStub(admin_channel).CreateTopic(
                rmq_pb2.CreateTopicRequest(config=config), timeout=10).status.code == rmq_pb2.OK
        with grpc.insecure_channel(broker.address) as channel:
            stub = MessagingServiceStub(channel)

            def receive(credentials: Credentials, group: str):
                request = pb.ReceiveMessageRequest(
                    group=v2.Resource(name=group),
                    message_queue=v2.MessageQueue(topic=v2.Resource(name="T"), id=-1),
                    filter_expression=v2.FilterExpression(type=v2.TAG, expression="*"), batch_size=1)
                request.long_polling_timeout.FromSeconds(60)
                return stub.ReceiveMessage(request, timeout=90, metadata=v2_metadata(credentials))

            hog = [receive(hog_key, f"hog{n}") for n in range(2)]
            wait_until(lambda: pops._held.count("hogaccount") == 2, "the hog holds every receive slot")
            polite = receive(polite_key, "polite")
            wait_until(lambda: pops._held.count("politeaccount") == 1, "the polite receive is held")
            assert pops._held.count("hogaccount") == 1
            with ThreadPoolExecutor(len(hog)) as readers:
                try:
                    first_answers = [readers.submit(next, call) for call in hog]
                    done, _ = wait(first_answers, timeout=10, return_when=FIRST_COMPLETED)
                    # the displaced one is answered as at its long-polling timeout
                    assert [answer.result().status.code for answer in done] == [v2.MESSAGE_NOT_FOUND]
                    assert pops._held.count("politeaccount") == 1
                finally:
                    for call in [*hog, polite]:
                        call.cancel()
    finally:
        broker.stop()
