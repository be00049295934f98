"""Producer connections per producer group (RocketMQ's producerConnection): a 4.x producer's
heartbeat (producerDataSet) registers it with its client id, address, language and version; it
leaves with its connection; `rmq group producers` and MQAdmin.producers list it."""

from __future__ import annotations

import json
from pathlib import Path

from rmq.connector.admin import ClientProtocol, MQAdmin, ProducerMember
from rmq.connector.client import RmqClient
from rmq.remoting.remoting_command import LanguageCode, RemotingCommand
from rmq.remoting.request_code import RequestCode
from tests.broker_server.in_process_broker import start_remoting_broker
from tests.broker_server.remoting_client import RemotingTestClient
from tests.waiting import wait_until


def test_a_4x_producer_is_listed_in_its_group_until_its_connection_closes(tmp_path: Path) -> None:
    broker = start_remoting_broker(tmp_path / "store")
    try:
        with RmqClient(broker.address) as client:
            admin = MQAdmin(client)
            producer = RemotingTestClient(broker.config.remoting_listen)
            heartbeat = {"clientID": "cpp-producer@1", "producerDataSet": [{"groupName": "pg"}],
                         "consumerDataSet": []}
            answer = producer.call(RemotingCommand(RequestCode.HEART_BEAT, language=LanguageCode.CPP,
                                                   version=413, body=json.dumps(heartbeat).encode()))
            assert answer.code == 0
            [member] = admin.producers("pg")
            assert member == ProducerMember("cpp-producer@1", ClientProtocol.REMOTING, member.address,
                                            "CPP", 413)
            assert "127.0.0.1:" in member.address     # the producer's end of its connection
            assert admin.producers("other") == []
            producer.close()
            wait_until(lambda: admin.producers("pg") == [], "the producer left with its connection")
    finally:
        broker.stop()
