"""Every request code the 4.x remoting port serves, against the ACL (issue 40 item 1; the gRPC
port's table is test_rpc_permissions.py): signed by an account without the permission the code
needs, the request is refused NO_PERMISSION; signed by one with it, it is served. Each refused
account is chosen so that it would get through everything after the code's own check (e.g. SUB on
the topic but not the group), so a check taken out shows here. Also: an account's
whiteRemoteAddress holds for both remoting signatures (item 2), and a pull's piggy-backed commit
offset is stored by the pull itself (item 3). A new request code lands with its row."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from rmq.broker_server.remoting.remoting_acl import signed
from rmq.broker_server.security.acl_file import AclFile
from rmq.broker_server.security.server_security import ServerSecurity
from rmq.remoting import request_signing
from rmq.remoting.remoting_command import RemotingCommand
from rmq.remoting.request_code import RequestCode, ResponseCode
from rmq.request_signing import broker_server_id
from tests.acl_files import write_acl
from tests.broker_server.in_process_broker import InProcessBroker
from tests.broker_server.remoting_client import RemotingTestClient
from tests.broker_server.test_remoting_broker import (
    GROUP,
    TOPIC,
    end_transaction,
    pull,
    request,
    send_v2,
    start_broker,
)

ACL = """accounts:
  - {accessKey: producer, secretKey: 'producer-secret', topicPerms: ['remoting-t=PUB']}
  - {accessKey: consumer, secretKey: 'consumer-secret', topicPerms: ['remoting-t=SUB'],
     groupPerms: ['remoting-g=SUB']}
  - {accessKey: intruder, secretKey: 'intruder-secret', groupPerms: ['remoting-g=SUB']}
  - {accessKey: lurker, secretKey: 'lurker-secret', topicPerms: ['remoting-t=SUB']}
  - {accessKey: neighbour, secretKey: 'neighbour-secret', topicPerms: ['remoting-t=SUB'],
     groupPerms: ['other-g=SUB']}
  - {accessKey: stranger, secretKey: 'stranger-secret'}
  - {accessKey: fenced, secretKey: 'fenced-secret', topicPerms: ['remoting-t=SUB'],
     groupPerms: ['remoting-g=SUB'], whiteRemoteAddress: 127.0.0.2}
"""
# intruder: SUB on the group, no topic; lurker: SUB on the topic, no group; neighbour: SUB on the topic
# and on another group, where it registered a client; stranger: a valid signature and nothing else


@dataclass
class Setup:
    """What the rows refer to, made once: a stored message's CommitLog offset, an open
    transaction, a pending timer message's recall handle, clients registered by `consumer` and by
    `neighbour`."""

    broker_name: str
    offset: int
    transaction: RemotingCommand
    recall_handle: str


@dataclass(frozen=True)
class Row:
    name: str
    code: int
    build: Callable[[Setup], RemotingCommand]
    allowed: str   # an account that holds the permission
    denied: str | None   # one that does not (None: the code needs only a signature)
    denied_build: Callable[[Setup], RemotingCommand] | None = None   # what it asks, when not `build`

    def refused_request(self, setup: Setup) -> RemotingCommand:
        return (self.denied_build or self.build)(setup)


def heartbeat(client_id: str) -> RemotingCommand:
    data = {"clientID": client_id, "consumerDataSet": [{
        "groupName": GROUP, "messageModel": "CLUSTERING",
        "subscriptionDataSet": [{"topic": TOPIC, "subString": "*"}]}]}
    return request(RequestCode.HEART_BEAT, body=json.dumps(data).encode())


def locking(code: int, client_id: str, broker_name: str) -> RemotingCommand:
    data = {"consumerGroup": GROUP, "clientId": client_id,
            "mqSet": [{"topic": TOPIC, "brokerName": broker_name, "queueId": 0}]}
    return request(code, body=json.dumps(data).encode())


def batch() -> RemotingCommand:
    body, properties = b"batched", b""
    entry = (len(body) + len(properties) + 22).to_bytes(4, "big") + bytes(12) + len(body).to_bytes(4, "big")
    command = send_v2(b"", {})
    command.code = RequestCode.SEND_BATCH_MESSAGE
    command.body = entry + body + len(properties).to_bytes(2, "big") + properties
    return command


def running_info(client_id: str) -> RemotingCommand:
    return request(RequestCode.GET_CONSUMER_RUNNING_INFO, consumerGroup=GROUP, clientId=client_id,
                   jstackEnable="false")


def send_v1() -> RemotingCommand:
    return request(RequestCode.SEND_MESSAGE, body=b"v1", producerGroup="pg", topic=TOPIC,
                   defaultTopic="TBW102", defaultTopicQueueNums=4, queueId=0, sysFlag=0, bornTimestamp=0,
                   flag=0, properties="", reconsumeTimes=0)


OFFSET_FIELDS = {"topic": TOPIC, "queueId": 0}
ROWS = [
    Row("send", RequestCode.SEND_MESSAGE, lambda s: send_v1(), "producer", "lurker"),
    Row("send-v2", RequestCode.SEND_MESSAGE_V2, lambda s: send_v2(b"v2", {}), "producer", "lurker"),
    Row("send-batch", RequestCode.SEND_BATCH_MESSAGE, lambda s: batch(), "producer", "lurker"),
    Row("half-message-send", RequestCode.SEND_MESSAGE_V2,
        lambda s: send_v2(b"half", {"UNIQ_KEY": "HALF-ROW", "TRAN_MSG": "true"}, 1, sys_flag=4),
        "producer", "lurker"),
    Row("end-transaction", RequestCode.END_TRANSACTION, lambda s: end_transaction(s.transaction, 8),
        "producer", "lurker"),
    Row("recall", RequestCode.RECALL_MESSAGE,
        lambda s: request(RequestCode.RECALL_MESSAGE, producerGroup="pg", topic=TOPIC,
                          recallHandle=s.recall_handle),
        "producer", "lurker"),
    Row("pull", RequestCode.PULL_MESSAGE, lambda s: pull(0, 0), "consumer", "intruder"),
    Row("query-offset", RequestCode.QUERY_CONSUMER_OFFSET,
        lambda s: request(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup=GROUP, **OFFSET_FIELDS),
        "consumer", "lurker"),
    Row("update-offset", RequestCode.UPDATE_CONSUMER_OFFSET,
        lambda s: request(RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup=GROUP, commitOffset=0,
                          **OFFSET_FIELDS),
        "consumer", "lurker"),
    Row("max-offset", RequestCode.GET_MAX_OFFSET,
        lambda s: request(RequestCode.GET_MAX_OFFSET, **OFFSET_FIELDS), "producer", "intruder"),
    Row("min-offset", RequestCode.GET_MIN_OFFSET,
        lambda s: request(RequestCode.GET_MIN_OFFSET, **OFFSET_FIELDS), "producer", "intruder"),
    Row("search-offset-by-time", RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
        lambda s: request(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, timestamp=0, **OFFSET_FIELDS),
        "producer", "intruder"),
    Row("heartbeat", RequestCode.HEART_BEAT, lambda s: heartbeat("heartbeat-row"), "consumer", "lurker"),
    Row("unregister", RequestCode.UNREGISTER_CLIENT,
        lambda s: request(RequestCode.UNREGISTER_CLIENT, clientID="unregister-row", consumerGroup=GROUP),
        "consumer", "lurker"),
    Row("consumer-list", RequestCode.GET_CONSUMER_LIST_BY_GROUP,
        lambda s: request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, consumerGroup=GROUP), "consumer", "lurker"),
    Row("consumer-running-info", RequestCode.GET_CONSUMER_RUNNING_INFO,
        lambda s: running_info("consumer-client"), "consumer", "neighbour",
        # `neighbour` registered neighbour-client in other-g and names remoting-g, where it holds no SUB
        denied_build=lambda s: running_info("neighbour-client")),
    Row("send-back", RequestCode.CONSUMER_SEND_MSG_BACK,
        lambda s: request(RequestCode.CONSUMER_SEND_MSG_BACK, group=GROUP, offset=s.offset, delayLevel=0,
                          originMsgId="", originTopic=TOPIC, maxReconsumeTimes=16),
        "consumer", "lurker"),
    Row("lock", RequestCode.LOCK_BATCH_MQ,
        lambda s: locking(RequestCode.LOCK_BATCH_MQ, "lock-row", s.broker_name), "consumer", "lurker"),
    Row("unlock", RequestCode.UNLOCK_BATCH_MQ,
        lambda s: locking(RequestCode.UNLOCK_BATCH_MQ, "lock-row", s.broker_name), "consumer", "lurker"),
    Row("route", RequestCode.GET_ROUTEINFO_BY_TOPIC,
        lambda s: request(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=TOPIC), "stranger", None),
    Row("check-client-config", RequestCode.CHECK_CLIENT_CONFIG,
        lambda s: request(RequestCode.CHECK_CLIENT_CONFIG, body=b'{"subscriptionData": {}}'),
        "stranger", None),
]

def as_account(command: RemotingCommand, account: str) -> RemotingCommand:
    return signed(command, account, f"{account}-secret")


def call(client: RemotingTestClient, command: RemotingCommand) -> RemotingCommand:
    """Send `command` and wait for its answer, answering SUCCESS to whatever the broker asks this
    client meanwhile (a consumer's running info)."""
    opaque = client.send(command)
    while True:
        frame = client.read()
        if not frame.is_response:
            client.socket.sendall(frame.response(ResponseCode.SUCCESS, body=b'{"properties":{}}').encode())
        elif frame.opaque == opaque:
            return frame


Served = tuple[InProcessBroker, RemotingTestClient, Setup]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    directory = tmp_path_factory.mktemp("remoting-permissions")
    security = ServerSecurity(acl_file=AclFile(write_acl(directory / "acl.yml", ACL)))
    broker = start_broker(directory / "store", security=security)
    try:
        with RemotingTestClient(broker.config.remoting_listen) as client:
            sent = call(client, as_account(send_v2(b"stored", {}), "producer"))
            properties = {"UNIQ_KEY": "TX-ROW", "TRAN_MSG": "true", "PGROUP": "tx-pg"}
            transaction = call(client, as_account(send_v2(b"tx", properties, 1, sys_flag=4), "producer"))
            timer = call(client, as_account(send_v2(b"timer", {"TIMER_DELAY_SEC": "600"}), "producer"))
            for account in ("consumer", "neighbour"):
                beat = heartbeat(f"{account}-client")
                if account == "neighbour":
                    beat.body = beat.body.replace(GROUP.encode(), b"other-g")
                assert call(client, as_account(beat, account)).code == ResponseCode.SUCCESS
            setup = Setup(broker.config.broker_name, int(sent.ext_fields["msgId"][-16:], 16), transaction,
                          timer.ext_fields["recallHandle"])
            yield broker, client, setup
    finally:
        broker.stop()


def test_the_table_has_a_row_for_every_request_code_served(served: Served) -> None:
    broker, _, _ = served
    handlers = broker.controller.remoting.processor.dispatcher.handlers
    assert {row.code for row in ROWS} == set(handlers)


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_a_request_code_is_refused_without_its_permission_and_served_with_it(
    served: Served, row: Row
) -> None:
    _, client, setup = served
    if row.denied is not None:
        refused = call(client, as_account(row.refused_request(setup), row.denied))
        assert refused.code == ResponseCode.NO_PERMISSION, f"{row.denied}: {refused.code} {refused.remark}"
    unsigned = call(client, row.build(setup))
    assert unsigned.code == ResponseCode.NO_PERMISSION and "not signed" in unsigned.remark
    answer = call(client, as_account(row.build(setup), row.allowed))
    assert answer.code == ResponseCode.SUCCESS, f"{row.allowed}: {answer.code} {answer.remark}"


# -- item 2: whiteRemoteAddress ------------------------------------------------------------------
def test_an_accounts_white_remote_address_holds_for_both_remoting_signatures(served: Served) -> None:
    broker, _, _ = served
    address = broker.config.remoting_listen
    target = broker_server_id(broker.config.broker_name, broker.config.broker_id)
    schemes: dict[str, Callable[[RemotingCommand], RemotingCommand]] = {
        "4.x": lambda command: as_account(command, "fenced"),
        "rmq": lambda command: request_signing.sign(command, "fenced", "fenced-secret", target),
    }
    for scheme, sign in schemes.items():
        with RemotingTestClient(address) as outside, \
                RemotingTestClient(address, source="127.0.0.2") as inside:
            refused = call(outside, sign(pull(0, 0)))
            assert refused.code == ResponseCode.NO_PERMISSION, scheme
            assert "may not be used from address 127.0.0.1" in refused.remark, scheme
            assert call(inside, sign(pull(0, 0))).code == ResponseCode.SUCCESS, scheme


# -- item 3: a pull's piggy-backed commit --------------------------------------------------------
def test_a_pull_carrying_a_commit_offset_stores_it_itself(served: Served) -> None:
    _, client, _ = served
    commit = pull(1, 0)
    commit.ext_fields.update(sysFlag=str(1 | 4), commitOffset="7")   # FLAG_COMMIT_OFFSET | FLAG_SUBSCRIPTION
    assert call(client, as_account(commit, "consumer")).code != ResponseCode.NO_PERMISSION
    query = request(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup=GROUP, topic=TOPIC, queueId=1)
    stored = call(client, as_account(query, "consumer"))   # at once: no periodic update came between
    assert (stored.code, stored.ext_fields.get("offset")) == (ResponseCode.SUCCESS, "7")
