"""An in-process broker (tests/broker_server/in_process_broker.py) started with `--acl`, its
accounts, and the signing of RocketMQ 5 calls, for tests of who may touch what."""

from __future__ import annotations

import hashlib
import hmac
import time
from pathlib import Path
from typing import Any

from rmq.broker_server.security.acl_file import AclFile
from rmq.broker_server.security.server_security import ServerSecurity
from rmq.connector.client import RmqClient
from tests.acl_files import write_acl
from tests.broker_server.in_process_broker import InProcessBroker

SECRETS = {"admin1": "admin-secret", "consumer": "consumer-secret", "producer": "producer-secret",
           "stranger": "stranger-secret", "prying": "prying-secret"}
ACL_TEXT = """
accounts:
  - {accessKey: admin1, secretKey: admin-secret, admin: true}
  - accessKey: consumer
    secretKey: consumer-secret
    topicPerms: ["orders=SUB"]
    groupPerms: ["g=SUB"]
  - accessKey: producer
    secretKey: producer-secret
    topicPerms: ["orders=PUB", "secret=PUB"]
  - {accessKey: stranger, secretKey: stranger-secret}
  - accessKey: prying
    secretKey: prying-secret
    topicPerms: ["orders=PUB|SUB"]
    groupPerms: ["g=SUB"]
"""


def acl_broker(tmp_path: Path, **settings: Any) -> InProcessBroker:
    """A started in-process broker whose ACL holds the accounts above (`prying` may do on
    `orders` and group `g` what `producer` and `consumer` may, but is another account)."""
    acl = write_acl(tmp_path / "acl.yml", ACL_TEXT)
    return InProcessBroker(tmp_path / "store", ServerSecurity(AclFile(acl)), **settings).start()


def client(broker: InProcessBroker, account: str) -> RmqClient:
    return RmqClient(broker.address, access_key=account, secret_key=SECRETS[account])


def v2_metadata(account: str, client_id: str = "") -> tuple[tuple[str, str], ...]:
    """MQv2-HMAC-SHA1 headers of a RocketMQ 5 call by `account` (and its client id)."""
    date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    digest = hmac.new(SECRETS[account].encode(), date.encode(), hashlib.sha1).hexdigest()
    headers = [("x-mq-date-time", date),
               ("authorization", f"MQv2-HMAC-SHA1 Credential={account}, SignedHeaders=x-mq-date-time, "
                                 f"Signature={digest}")]
    if client_id:
        headers.append(("x-mq-client-id", client_id))
    return tuple(headers)
