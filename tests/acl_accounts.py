"""The accounts of the security tests (an ACL with an admin, a producer, two consumers and a
broker's registration account), the rmq.v1 client of one of them, and the check that a refusal
names no secret: shared by tests/broker_server/test_acl_refusals.py (an in-process broker) and
integration_tests/test_security.py (broker processes)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rmq.connector.client import RmqClient, RmqError

ADMIN = ("admin01", "admin-secret-0001")
PRODUCER = ("producer1", "producer-secret-01")     # PUB on orders, no group
CONSUMER = ("consumer1", "consumer-secret-01")     # SUB on orders, SUB on group etl
CONSUMER2 = ("consumer2", "consumer-secret-02")    # the same permissions as consumer1
BROKER_A = ("broker-a-registration", "broker-a-secret")   # may register broker-a, nothing more
SECRETS = [ADMIN[1], PRODUCER[1], CONSUMER[1], CONSUMER2[1], BROKER_A[1]]

ACL_TEMPLATE = """\
accounts:
  - accessKey: {admin[0]}
    secretKey: "{admin[1]}"
    admin: true
  - accessKey: {producer[0]}
    secretKey: "{producer[1]}"
    topicPerms: ["orders={producer_perm}"]
  - accessKey: {consumer[0]}
    secretKey: "{consumer[1]}"
    topicPerms: ["orders=SUB"]
    groupPerms: ["etl=SUB"]
  - accessKey: {consumer2[0]}
    secretKey: "{consumer2[1]}"
    topicPerms: ["orders=SUB"]
    groupPerms: ["etl=SUB"]
  - accessKey: {broker_a[0]}
    secretKey: "{broker_a[1]}"
    brokerName: broker-a
"""


def acl_text(producer_perm: str = "PUB") -> str:
    return ACL_TEMPLATE.format(admin=ADMIN, producer=PRODUCER, consumer=CONSUMER, consumer2=CONSUMER2,
                               broker_a=BROKER_A, producer_perm=producer_perm)


def client(address: str, account: tuple[str, str] | None = None, ca: Path | None = None) -> RmqClient:
    access_key, secret_key = account or (None, None)
    return RmqClient(address, timeout=5.0, access_key=access_key, secret_key=secret_key, tls=ca is not None,
                     tls_ca_file=str(ca) if ca else None)


def refusal(call: Callable[[], Any]) -> RmqError:
    with pytest.raises(RmqError) as raised:
        call()
    assert not any(secret in str(raised.value) for secret in SECRETS)
    return raised.value
