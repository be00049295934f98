"""Security against real broker processes: ACL reload on SIGHUP, refusals at start, TLS, broker
registration and replication under an ACL, the CLI's credentials, and the Spark source and
sink through TLS + ACL with the secret kept out of plans and logs (authentication, permissions
and replay defence of rmq.v1 calls: tests/broker_server/test_acl_refusals.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from rmq.auth import TlsSettings
from rmq.connector.client import OutgoingMessage, RmqError, RmqUnavailable
from testing import processes
from testing.processes import ServerProcess
from tests.acl_accounts import ADMIN, BROKER_A, CONSUMER, PRODUCER, SECRETS, acl_text, client, refusal
from tests.acl_files import write_acl
from tests.tls_certs import TlsFiles, make_tls_files

pytestmark = pytest.mark.integration


def security_flags(acl: Path | None, tls: TlsFiles | None) -> list[str]:
    return (["--acl", str(acl)] if acl else []) + (
        ["--tls-cert", str(tls.server_cert), "--tls-key", str(tls.server_key)] if tls else [])


def trusting(tls: TlsFiles | None) -> grpc.ChannelCredentials | None:
    """Credentials for the readiness probe of a TLS server."""
    return TlsSettings(tls.ca).channel_credentials() if tls else None


def secured_broker(directory: Path, acl: Path | None, tls: TlsFiles | None, **kwargs) -> ServerProcess:
    return processes.broker(directory, extra=security_flags(acl, tls), channel_credentials=trusting(tls),
                            **kwargs).start()


@pytest.fixture(scope="module")
def acl_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("acl") / "acl.yml"
    write_acl(path, acl_text())
    return path


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def tls_acl_broker(tmp_path_factory, acl_path: Path, tls_files: TlsFiles) -> Iterator[ServerProcess]:
    server = secured_broker(tmp_path_factory.mktemp("tls-broker"), acl_path, tls_files)
    with client(server.address, ADMIN, tls_files.ca) as admin:
        admin.create_topic("orders", queues=2)
    yield server
    server.stop()
    assert not any(secret in server.log() for secret in SECRETS)



# ---------------------------------------------------------------- reload


def test_acl_edit_takes_effect_on_sighup(tmp_path: Path) -> None:
    acl = tmp_path / "acl.yml"
    write_acl(acl, acl_text(producer_perm="SUB"))
    server = secured_broker(tmp_path, acl, None)
    try:
        with client(server.address, ADMIN) as admin, client(server.address, PRODUCER) as producer:
            admin.create_topic("orders", queues=1)
            assert "lacks PUB on topic 'orders'" in str(refusal(lambda: producer.send("orders", [
                OutgoingMessage(b"x")])))
            write_acl(acl, acl_text(producer_perm="PUB"))
            server.process.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 10
            while True:
                try:
                    producer.send("orders", [OutgoingMessage(b"x")])
                    break
                except RmqError:
                    assert time.monotonic() < deadline, server.log()
                    time.sleep(0.1)
        assert "ACL reloaded" in server.log()
    finally:
        server.stop()


def test_listening_beyond_loopback_without_an_acl_is_refused(tmp_path: Path) -> None:
    listen = f"0.0.0.0:{processes.free_port()}"
    refused = rmq_cli("broker", "--listen", listen, "--store-dir", str(tmp_path / "store"))
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert f"refusing to listen on {listen} without --acl" in refused.stderr
    assert "--insecure-listen" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


def test_an_empty_white_remote_address_is_refused_at_start(tmp_path: Path) -> None:
    acl = write_acl(tmp_path / "acl.yml", acl_text() + '    whiteRemoteAddress: ""\n')
    refused = rmq_cli("broker", "--listen", f"127.0.0.1:{processes.free_port()}", "--store-dir",
                      str(tmp_path / "store"), "--acl", str(acl))
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert "whiteRemoteAddress must be one address pattern" in refused.stderr


def test_broker_without_acl_says_it_trusts_loopback_only(broker: ServerProcess) -> None:
    notice = f"no --acl: every caller is trusted, so listening on loopback {broker.address} only"
    assert notice in broker.log()


# ---------------------------------------------------------------- TLS


def test_tls_client_works_and_plaintext_client_is_refused(tls_acl_broker: ServerProcess,
                                                          tls_files: TlsFiles) -> None:
    with client(tls_acl_broker.address, PRODUCER, tls_files.ca) as producer:
        assert producer.send("orders", [OutgoingMessage(b"over tls")]).msg_ids
    with client(tls_acl_broker.address, PRODUCER) as plaintext:
        with pytest.raises(RmqUnavailable):
            plaintext.send("orders", [OutgoingMessage(b"in clear")])


def test_a_broker_account_registers_its_own_broker_only(tmp_path: Path, acl_path: Path) -> None:
    """One broker's credential cannot re-point another broker's routes."""
    namesrv = processes.namesrv(tmp_path, extra=security_flags(acl_path, None)).start()
    own_env = {"RMQ_ACCESS_KEY": BROKER_A[0], "RMQ_SECRET_KEY": BROKER_A[1]}
    broker_a = secured_broker(tmp_path, acl_path, None, name="broker-a", namesrv_address=namesrv.address,
                              **own_env)
    impostor = secured_broker(tmp_path, acl_path, None, name="broker-b", namesrv_address=namesrv.address,
                              **own_env)
    try:
        with client(namesrv.address, ADMIN) as admin:
            deadline = time.monotonic() + 20
            while "broker-a" not in admin.list_brokers():
                assert time.monotonic() < deadline, namesrv.log()
                time.sleep(0.1)
            assert admin.list_brokers() == {"broker-a": broker_a.address}
        assert "RegisterBroker with name server" in impostor.log() and "PERMISSION_DENIED" in impostor.log()
        assert "access key 'broker-a-registration' may not register broker 'broker-b'" in namesrv.log()
    finally:
        for server in (impostor, broker_a, namesrv):
            server.stop()


def test_a_slave_replicates_from_a_master_with_an_acl(tmp_path: Path, acl_path: Path) -> None:
    """HAService.Transfer, a client stream, is signed once when it opens (admin account), and
    both members prove the group's cluster secret (--cluster-secret, required with --acl)."""
    for role in ("master", "slave"):
        (tmp_path / role).mkdir()
    secret = write_acl(tmp_path / "cluster-secret", "a secret of the broker group, 40 characters")
    group_flags = security_flags(acl_path, None) + ["--cluster-secret", str(secret)]
    master = processes.broker(tmp_path / "master", extra=group_flags).start()
    slave = processes.broker(tmp_path / "slave", extra=group_flags + [
        "--broker-id", "1", "--role", "SLAVE", "--master", master.address],
        RMQ_ACCESS_KEY=ADMIN[0], RMQ_SECRET_KEY=ADMIN[1]).start()
    try:
        with client(master.address, ADMIN) as admin:
            admin.create_topic("orders", queues=1)
            admin.send("orders", [OutgoingMessage(b"replicated")])
        deadline = time.monotonic() + 20
        while "replicating from master" not in slave.log():
            assert time.monotonic() < deadline, slave.log()
            time.sleep(0.1)
    finally:
        slave.stop()
        master.stop()
    assert "refused /rmq.v1.HAService/Transfer" not in master.log()


def test_brokers_register_with_a_secured_name_server_using_admin_credentials(
        tmp_path: Path, acl_path: Path, tls_files: TlsFiles) -> None:
    namesrv = processes.namesrv(tmp_path, extra=security_flags(acl_path, tls_files),
                                channel_credentials=trusting(tls_files)).start()
    admin_env = {"RMQ_ACCESS_KEY": ADMIN[0], "RMQ_SECRET_KEY": ADMIN[1], "RMQ_TLS_CA_FILE": str(tls_files.ca)}
    registered = secured_broker(tmp_path, acl_path, tls_files, name="broker-a",
                                namesrv_address=namesrv.address, **admin_env)
    anonymous = secured_broker(tmp_path, acl_path, tls_files, name="broker-b",
                               namesrv_address=namesrv.address, RMQ_TLS_CA_FILE=str(tls_files.ca))
    try:
        with client(namesrv.address, ADMIN, tls_files.ca) as admin, \
                client(namesrv.address, CONSUMER, tls_files.ca) as consumer:
            deadline = time.monotonic() + 20
            while "broker-a" not in admin.list_brokers():
                assert time.monotonic() < deadline, namesrv.log()
                time.sleep(0.1)
            admin.create_topic("orders", queues=2)
            route = consumer.query_route("orders")
            assert route.brokers == {"broker-a": registered.address}
            assert "broker-b" not in admin.list_brokers()
        assert "RegisterBroker with name server" in anonymous.log()
        assert "UNAUTHENTICATED" in anonymous.log()
    finally:
        for server in (anonymous, registered, namesrv):
            server.stop()
    assert not any(secret in server.log() for server in (namesrv, registered) for secret in SECRETS)


# ---------------------------------------------------------------- CLI


def rmq_cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RMQ_")}
    return subprocess.run([sys.executable, "-m", "rmq.cli", *args], capture_output=True,
                          text=True, env={**clean, **env}, timeout=60)


def test_cli_presents_a_client_certificate_to_a_mutual_tls_broker(tmp_path: Path, acl_path: Path,
                                                                   tls_files: TlsFiles) -> None:
    extra = security_flags(acl_path, tls_files) + ["--tls-client-ca", str(tls_files.ca)]
    mutual = processes.broker(tmp_path, extra=extra, channel_credentials=TlsSettings(
        tls_files.ca, tls_files.client_cert, tls_files.client_key).channel_credentials()).start()
    env = {"RMQ_ACCESS_KEY": ADMIN[0], "RMQ_SECRET_KEY": ADMIN[1], "RMQ_TLS_CA_FILE": str(tls_files.ca)}
    try:
        with_cert = rmq_cli("topic", "list", "--endpoints", mutual.address, "--tls-cert",
                            str(tls_files.client_cert), "--tls-key", str(tls_files.client_key), **env)
        from_environment = rmq_cli("topic", "list", "--endpoints", mutual.address, **env,
                                   RMQ_TLS_CERT_FILE=str(tls_files.client_cert),
                                   RMQ_TLS_KEY_FILE=str(tls_files.client_key))
        without = rmq_cli("topic", "list", "--endpoints", mutual.address, **env)
    finally:
        mutual.stop()
    assert with_cert.returncode == 0, with_cert.stderr
    assert from_environment.returncode == 0, from_environment.stderr
    assert without.returncode != 0 and "Traceback" not in without.stderr


def test_cli_takes_credentials_and_tls_from_the_environment(tls_acl_broker: ServerProcess,
                                                            tls_files: TlsFiles) -> None:
    env = {"RMQ_ACCESS_KEY": PRODUCER[0], "RMQ_SECRET_KEY": PRODUCER[1], "RMQ_TLS_CA_FILE": str(tls_files.ca)}
    done = rmq_cli("produce", "orders", "--count", "3", "--endpoints", tls_acl_broker.address, **env)
    assert done.returncode == 0, done.stderr
    refused = rmq_cli("topic", "describe", "orders", "--endpoints", tls_acl_broker.address,
                      "--access-key", CONSUMER[0], "--tls", RMQ_SECRET_KEY="wrong-secret-value",
                      RMQ_TLS_CA_FILE=str(tls_files.ca))
    assert refused.returncode != 0
    assert "signature not accepted for access key 'consumer1'" in refused.stderr
    assert "Traceback" not in refused.stderr and "wrong-secret-value" not in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


# ---------------------------------------------------------------- Spark


@pytest.mark.spark
def test_spark_source_and_sink_through_tls_and_acl(spark, tls_acl_broker: ServerProcess,
                                                   tls_files: TlsFiles, tmp_path: Path, capsys) -> None:
    common = {"endpoints": tls_acl_broker.address, "tls": "true", "tlsCaFile": str(tls_files.ca)}
    consumer = {"accessKey": CONSUMER[0], "secretKey": CONSUMER[1], "consumerGroup": "etl", "topic": "orders"}
    rows = spark.createDataFrame([(f"spark-{i}",) for i in range(20)], "body string")
    (rows.write.format("rmq").mode("append")
     .options(**common, topic="orders", accessKey=PRODUCER[0], secretKey=PRODUCER[1]).save())

    df = spark.read.format("rmq").options(**common, **consumer).load()
    expected = {f"spark-{i}" for i in range(20)}
    assert expected <= {bytes(row.body).decode() for row in df.select("body").collect()}
    df.explain(extended=True)

    stream = spark.readStream.format("rmq").options(**common, **consumer, startingOffsets="earliest").load()
    query = (stream.writeStream.format("memory").queryName("secured_orders").trigger(availableNow=True)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    query.awaitTermination(120)
    assert query.exception() is None
    streamed = {bytes(row.body).decode() for row in spark.sql("select body from secured_orders").collect()}
    assert expected <= streamed
    query.explain(extended=True)
    progress = str(query.lastProgress)

    plans = capsys.readouterr().out
    assert "RelationV2" in plans
    assert not any(secret in plans + progress for secret in SECRETS)

    impostor = {**consumer, "secretKey": "wrong-secret-value"}
    denied = spark.read.format("rmq").options(**common, **impostor).load()
    with pytest.raises(Exception, match="signature not accepted") as raised:
        denied.collect()
    assert "wrong-secret-value" not in str(raised.value)
