"""A streaming query over `format("rmq")` through Spark Connect: the server started from the
installed PySpark (sbin/start-connect-server.sh), the data source registered from a Connect
client (`SparkSession.builder.remote(...)`) in a process of its own
(integration_tests/spark_connect_client.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from integration_tests.spark_processes import ScriptProcess, connect_server, spark_env
from integration_tests.spark_source_support import produce, wait_dispatched
from rmq.connector.client import RmqClient
from testing.processes import ServerProcess

pytestmark = [pytest.mark.integration, pytest.mark.spark]

CLIENT = Path(__file__).with_name("spark_connect_client.py")
MESSAGES = 20   # 2 x the client's maxMessagesPerTrigger: two micro-batches


def test_a_streaming_query_through_spark_connect_reads_every_message_once(
        broker: ServerProcess, tmp_path: Path) -> None:
    pytest.importorskip("grpc_status", reason="the Spark Connect client needs grpcio-status (extra [test])")
    with RmqClient(broker.address) as client:
        client.create_topic("connect", queues=2)
        sent = produce(client, "connect", MESSAGES)
        offsets = wait_dispatched(client, "connect", MESSAGES)
    with connect_server(tmp_path / "spark") as remote:
        client_process = ScriptProcess(CLIENT, ["--remote", remote, "--endpoints", broker.address,
                                                "--topic", "connect"],
                                       tmp_path / "client.log", spark_env(tmp_path / "spark"))
        try:
            answer = client_process.ask("read")
        finally:
            assert client_process.finish() == 0, (tmp_path / "client.log").read_text(errors="replace")[-4000:]
    assert answer["session"] == "pyspark.sql.connect.session.SparkSession"
    assert answer["batches"] == [10, 10]
    rows = answer["rows"]
    assert sorted(body.encode() for _, _, body in rows) == sorted(sent)
    positions = {(queue_id, offset) for queue_id, offset, _ in rows}
    assert positions == {(mq.queue_id, offset) for mq, end in offsets.items() for offset in range(end)}
