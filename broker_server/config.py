"""Broker and name server configuration: dataclasses with the spec's defaults, loaded from an
optional YAML or JSON file (keys are the field names) with command-line flags on top.
Every bad value is reported as one `UserError` line naming the key."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rmq.broker_server.delay_levels import DEFAULT_MESSAGE_DELAY_LEVEL, parse_delay_levels
from rmq.broker_server.errors import UserError

MiB = 1024 * 1024


@dataclass
class BrokerConfig:
    listen: str = "127.0.0.1:10911"
    store_dir: str = "~/.rmq/store"
    broker_name: str = "broker-a"
    broker_id: int = 0  # 0: the group's master; 1..: a slave (RocketMQ brokerId)
    broker_role: str = "ASYNC_MASTER"  # ASYNC_MASTER | SYNC_MASTER | SLAVE (DESIGN.md Replication)
    master: str = ""  # slaves: HOST:PORT of the group's master
    slave_synchronize_interval_ms: int = 10000  # slaves copy topics and offsets from the master
    cluster_secret_file: str = ""  # the broker group's shared secret (docs/replication.md); every member
    controller: str = ""  # controller mode: HOST:PORT of `rmq namesrv --controller`, which assigns the role
    cluster_name: str = "DefaultCluster"  # brokerClusterName: a controller refuses other clusters' members
    controller_heartbeat_interval_ms: int = 1000  # controller mode: heartbeat period
    namesrv: str = ""  # name server addresses, comma-separated
    flush: str = "async"  # RocketMQ's default flushDiskType is ASYNC_FLUSH
    advertise_address: str = ""  # address registered with the name server (default: listen)
    store: dict[str, Any] = field(default_factory=dict)  # extra MessageStoreConfig fields
    max_message_size: int = 4 * MiB  # whole record (maxMessageSize)
    max_pull_messages: int = 32768  # larger PullMessage.max_messages are clamped
    default_pull_max_bytes: int = 8 * MiB  # PullMessage.max_bytes = 0
    max_pull_bytes: int = 48 * MiB  # larger max_bytes are clamped (below the gRPC limit)
    grpc_max_message_bytes: int = 64 * MiB
    store_threads: int = 8  # threads running blocking store calls
    long_polling_enable: bool = True
    short_polling_time_ms: int = 1000  # hold time and check period without long polling
    hold_check_interval_ms: int = 5000  # PullRequestHoldService fallback check
    client_expiry_ms: int = 120000  # channelExpiredTimeout
    client_scan_interval_ms: int = 10000
    max_consumer_id_watchers: int = 4096  # membership watch streams one broker holds
    # Bounds on what clients make the broker hold (refused with LIMIT_EXCEEDED naming the setting):
    max_held_pulls: int = 65536  # long-polling hold table
    max_inflight_pull_bytes: int = 256 * MiB  # pull answers built and not yet read (about 3x in RSS)
    max_inflight_pull_bytes_per_connection: int = 64 * MiB  # the same, on one client connection
    max_consumer_groups: int = 4096  # consumer table (and the retry topics heartbeats create)
    max_clients_per_group: int = 1024
    max_consumer_clients: int = 16384  # over every group
    max_subscriptions_per_client: int = 1024  # topics in one heartbeat
    max_subscription_bytes: int = 64 * MiB  # every client's subscriptions together
    max_queue_locks: int = 65536  # ordered-consumption lock table
    # RocketMQ 5 receives remembered by attempt id for a retried receive (oldest forgotten first):
    max_remembered_receives: int = 10_000
    max_remembered_receive_bytes: int = 64 * MiB  # record bytes those deliveries hold
    max_consumer_offsets: int = 262144  # committed (group, topic, queue) entries
    rebalance_lock_max_live_time_ms: int = 60000
    consumer_offset_persist_interval_ms: int = 5000
    message_delay_level: str = DEFAULT_MESSAGE_DELAY_LEVEL
    delay_offset_persist_interval_ms: int = 10000  # flushDelayOffsetInterval
    register_broker_interval_ms: int = 30000
    auto_create_topic_enable: bool = False
    default_topic_queue_nums: int = 8  # queues of an auto-created topic
    retry_max_times: int = 16  # RocketMQ 5 consumer groups: DLQ after retry_max_times + 1 deliveries
    fifo_consumer_groups: str = ""  # RocketMQ 5 groups consuming in order (comma-separated)
    timer_max_delay_ms: int = 86_400_000  # RocketMQ 5 DELAY messages: at most a day ahead (proxy)
    transaction_timeout_ms: int = 6000  # open transactions are checked back after this (transactionTimeOut)
    transaction_check_interval_ms: int = 30000  # then every interval (transactionCheckInterval)
    transaction_check_max: int = 15  # checks before an open transaction is dropped (transactionCheckMax)
    metrics_listen: str = ""  # Prometheus scrape endpoint HOST:PORT (off when empty)
    enable_property_filter: bool = True  # SQL92 subscriptions (RocketMQ enablePropertyFilter)

    @property
    def store_path(self) -> Path:
        return Path(self.store_dir).expanduser()

    @property
    def namesrv_addresses(self) -> list[str]:
        return [address.strip() for address in self.namesrv.split(",") if address.strip()]

    @property
    def broker_address(self) -> str:
        return self.advertise_address or self.listen

    def validate(self) -> None:
        check_address("listen", self.listen)
        if self.metrics_listen:
            check_address("metrics_listen", self.metrics_listen)
        if self.advertise_address:
            check_address("advertise_address", self.advertise_address)
        for address in self.namesrv_addresses:
            check_address("namesrv", address)
        if self.flush not in ("sync", "async"):
            raise UserError(f"flush must be 'sync' or 'async', not {self.flush!r}")
        if not self.broker_name or not all(c.isalnum() or c in "_-." for c in self.broker_name):
            raise UserError(
                f"broker name {self.broker_name!r} may only contain letters, digits, '_', '-' and '.'"
            )
        self._validate_role()
        _check_positive_ints(self)
        if self.max_pull_bytes >= self.grpc_max_message_bytes:
            raise UserError("max_pull_bytes must be smaller than grpc_max_message_bytes")
        if self.max_inflight_pull_bytes_per_connection > self.max_inflight_pull_bytes:
            raise UserError("max_inflight_pull_bytes_per_connection must not be larger than "
                            "max_inflight_pull_bytes")
        try:
            parse_delay_levels(self.message_delay_level)
        except ValueError as error:
            raise UserError(f"message_delay_level: {error}") from None

    def _validate_role(self) -> None:
        roles = ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE")
        if self.broker_role not in roles:
            raise UserError(f"role must be one of {', '.join(roles)}, not {self.broker_role!r}")
        if self.controller:
            check_address("controller", self.controller)
            if self.broker_role == "SLAVE" or self.master:
                raise UserError("with --controller the controller assigns master and slaves: --role names "
                                "the master's mode (SYNC_MASTER or ASYNC_MASTER), and --master is not given")
            return
        if self.broker_role == "SLAVE":
            if self.broker_id < 1:
                raise UserError(f"a SLAVE needs a broker id of 1 or more, not {self.broker_id}")
            if not self.master:
                raise UserError("a SLAVE needs --master HOST:PORT (its broker group's master)")
            check_address("master", self.master)
        elif self.broker_id != 0 or self.master:
            raise UserError(f"a {self.broker_role} has broker id 0 and no --master "
                            f"(got id {self.broker_id}{', master ' + self.master if self.master else ''})")


@dataclass
class NameServerConfig:
    listen: str = "127.0.0.1:9876"
    broker_expiry_ms: int = 120000  # brokerChannelExpiredTime
    broker_scan_interval_ms: int = 10000  # scanNotActiveBroker period
    grpc_max_message_bytes: int = 64 * MiB
    metrics_listen: str = ""  # Prometheus scrape endpoint HOST:PORT (off when empty)
    controller: bool = False  # embed the controller (DESIGN.md Controller mode)
    controller_dir: str = "~/.rmq/controller"  # where the controller keeps its state
    cluster_name: str = "DefaultCluster"  # the cluster whose broker groups the controller manages
    controller_failover_timeout_ms: int = 3000  # a master silent this long is replaced
    controller_scan_interval_ms: int = 500  # how often the controller checks for silent masters

    @property
    def controller_path(self) -> Path:
        return Path(self.controller_dir).expanduser()

    def validate(self) -> None:
        check_address("listen", self.listen)
        if self.metrics_listen:
            check_address("metrics_listen", self.metrics_listen)
        _check_positive_ints(self)


def load_config(config_class: type, path: str | None, overrides: dict[str, Any]):
    """`config_class` built from the file at `path` (YAML or JSON), then `overrides` (flags
    given on the command line, None meaning not given), validated."""
    values = read_config_file(path) if path else {}
    known = {f.name: f for f in dataclasses.fields(config_class)}
    for key, value in values.items():
        if key not in known:
            raise UserError(f"{path}: unknown key {key!r} (known: {', '.join(sorted(known))})")
        _check_type(f"{path}: {key}", known[key], value)
    values.update({key: value for key, value in overrides.items() if value is not None})
    config = config_class(**values)
    config.validate()
    return config


def read_config_file(path: str) -> dict[str, Any]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise UserError(f"cannot read config file {path}: {error.strerror}") from None
    try:
        content = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        raise UserError(
            f"config file {path} is not valid {'JSON' if path.endswith('.json') else 'YAML'}: "
            f"{str(error).splitlines()[0]}"
        ) from None
    if content is None:
        return {}
    if not isinstance(content, dict):
        raise UserError(f"config file {path} must hold a mapping of settings")
    return content


def check_address(name: str, address: str) -> None:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(f"{name} must be HOST:PORT with a port from 1 to 65535, not {address!r}")


def _check_type(name: str, spec: dataclasses.Field, value: Any) -> None:
    expected = {"int": int, "bool": bool, "str": str}.get(str(spec.type), dict)
    if expected is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise UserError(f"{name} must be an integer, not {value!r}")
    if not isinstance(value, expected):
        raise UserError(f"{name} must be a {expected.__name__}, not {value!r}")


_MAY_BE_ZERO = frozenset({"broker_id"})


def _check_positive_ints(config: Any) -> None:
    for spec in dataclasses.fields(config):
        value = getattr(config, spec.name)
        if str(spec.type) == "int" and spec.name not in _MAY_BE_ZERO and value <= 0:
            raise UserError(f"{spec.name} must be positive, not {value}")
