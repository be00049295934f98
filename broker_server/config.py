"""Broker and name server configuration: dataclasses with the spec's defaults, loaded from an
optional YAML or JSON file (keys are the field names) with command-line flags on top.
Every bad value is reported as one `UserError` line naming the key."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from rmq.broker_server.errors import UserError
from rmq.broker_server.processors.delay_levels import DEFAULT_MESSAGE_DELAY_LEVEL, parse_delay_levels
from rmq.store import BrokerRole, FlushDiskType, MessageStoreConfig

DEFAULT_CLUSTER_NAME = "DefaultCluster"   # RocketMQ's default brokerClusterName

MiB = 1024 * 1024
FLIGHT_OFF = "off"
REMOTING_OFF = "off"
StoreValue = int | float | str | bool   # a `store:` setting (a MessageStoreConfig field's value)
E = TypeVar("E", BrokerRole, FlushDiskType)


@dataclass
class BrokerConfig:
    listen: str = "127.0.0.1:10911"
    store_dir: str = "~/.rmq/store"
    broker_name: str = "broker-a"
    broker_id: int = 0  # 0: the group's master; 1..: a slave (RocketMQ brokerId)
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER  # given as its name, e.g. SLAVE (docs/replication.md)
    master: str = ""  # slaves: HOST:PORT of the group's master
    slave_synchronize_interval_ms: int = 10000  # slaves copy topics and offsets from the master
    cluster_secret_file: str = ""  # the broker group's shared secret (docs/replication.md); every member
    controller: str = ""  # controller mode: HOST:PORT[,HOST:PORT...] of the controllers (the leader decides)
    cluster_name: str = DEFAULT_CLUSTER_NAME  # brokerClusterName: a controller refuses other clusters
    controller_heartbeat_interval_ms: int = 1000  # controller mode: heartbeat period
    # a SYNC_MASTER not confirmed by the leading controller for this long answers no send OK (0: off)
    controller_master_lease_ms: int = 2500
    # SYNC_MASTER: members (master included) holding a put before it is acknowledged; 1 (controller
    # mode only): the master alone once the controller's in-sync set is the master alone
    min_in_sync_replicas: int = 2
    ha_max_time_not_caught_up_ms: int = 15000  # a slave behind this long leaves the in-sync set
    namesrv: str = ""  # name server addresses, comma-separated
    flush: FlushDiskType = FlushDiskType.ASYNC  # "sync" | "async" (RocketMQ's default is ASYNC_FLUSH)
    advertise_address: str = ""  # address registered with the name server (default: listen)
    store: dict[str, StoreValue] = field(default_factory=dict)  # extra MessageStoreConfig fields
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
    max_inflight_pull_bytes_per_account: int = 0  # per access key (client IP without --acl); 0: half
    max_consumer_groups: int = 4096  # consumer table (and the retry topics heartbeats create)
    max_clients_per_group: int = 1024
    max_consumer_clients: int = 16384  # over every group
    max_subscriptions_per_client: int = 1024  # topics in one heartbeat
    max_subscription_bytes: int = 64 * MiB  # every client's subscriptions together
    max_queue_locks: int = 65536  # ordered-consumption lock table
    # RocketMQ 5 receives remembered by attempt id for a retried receive (oldest forgotten first):
    max_remembered_receives: int = 10_000
    max_remembered_receive_bytes: int = 64 * MiB  # record bytes those deliveries hold
    max_telemetry_sessions: int = 10_000  # RocketMQ 5 Telemetry streams one broker holds
    max_telemetry_sessions_per_account: int = 1_000  # ... of which one ACL account may hold
    max_consumer_offsets: int = 262144  # committed (group, topic, queue) entries
    max_consumer_offsets_per_account: int = 65536  # of them, added by one --acl account
    max_metric_groups: int = 1_000  # consumer group names /metrics writes as label values (others: _other)
    max_metric_groups_per_account: int = 32  # ... of which first seen from one --acl account
    rebalance_lock_max_live_time_ms: int = 60000
    consumer_offset_persist_interval_ms: int = 5000
    message_delay_level: str = DEFAULT_MESSAGE_DELAY_LEVEL
    delay_offset_persist_interval_ms: int = 10000  # flushDelayOffsetInterval
    register_broker_interval_ms: int = 30000
    auto_create_topic_enable: bool = False
    default_topic_queue_nums: int = 8  # queues of an auto-created topic
    retry_max_times: int = 16  # RocketMQ 5 consumer groups: DLQ after retry_max_times + 1 deliveries
    fifo_consumer_groups: str = ""  # RocketMQ 5 groups consuming in order (comma-separated)
    # Timer messages (docs/internals/timer.md): a wheel slot per timer_precision_ms, delivery at most
    # timer_max_delay_s ahead (timerMaxDelaySec), WHEEL_TIMER_FLOW_CONTROL past the pending bounds.
    timer_precision_ms: int = 1000
    timer_max_delay_s: int = 3 * 86_400
    timer_max_pending: int = 10_000_000
    timer_max_pending_per_account: int = 2_000_000
    min_invisible_ms: int = 10_000  # RocketMQ 5 receives: the shortest invisibility (proxy)
    transaction_timeout_ms: int = 6000  # open transactions are checked back after this (transactionTimeOut)
    transaction_check_interval_ms: int = 30000  # then every interval (transactionCheckInterval)
    transaction_check_max: int = 15  # checks before an open transaction is dropped (transactionCheckMax)
    max_open_transactions: int = 100_000  # RocketMQ 5 open transactions (half messages) ...
    max_open_transactions_per_account: int = 10_000  # ... of which one ACL account may hold
    metrics_listen: str = ""  # Prometheus scrape endpoint HOST:PORT (off when empty)
    # Arrow Flight data plane (docs/data-plane.md): HOST:PORT, "off", or "" = listen's host, ephemeral port
    flight_listen: str = ""
    max_flight_streams: int = 64  # Flight reads served at once (each holds at most one batch of pull bytes)
    max_flight_streams_per_account: int = 16  # the same, per access key (per client IP without --acl)
    max_flight_connections_per_address: int = 64  # Flight connections from one client IP (all count in
    # --max-connections with the gRPC port's)
    enable_property_filter: bool = True  # SQL92 subscriptions (RocketMQ enablePropertyFilter)
    filter_threads: int = 1  # SQL92 evaluation runs on these threads only (all accounts share them fairly)
    max_pending_filter_reads_per_account: int = 4096  # SQL92 reads one account may have waiting for them
    # RocketMQ remoting protocol (broker_server/remoting; docs/remoting-protocol.md): 4.x clients and the
    # SDK's send / held-pull path. HOST:PORT, "off", or "" = listen's host, ephemeral port (advertised)
    remoting_listen: str = ""
    remoting_max_frame_bytes: int = 16 * MiB
    remoting_max_connections: int = 4096
    remoting_max_request_bytes: int = 256 * MiB  # request frames read and not yet answered, in all
    remoting_max_request_bytes_per_connection: int = 64 * MiB  # the same, on one connection
    remoting_max_request_bytes_per_account: int = 64 * MiB  # the same, per access key (client IP w/o --acl)
    remoting_max_connections_per_address: int = 1024  # connections from one client IP

    def __post_init__(self) -> None:
        """Role and flush given as text (a config file, a flag, a test) become their enums."""
        self.broker_role = _enum_setting("role", BrokerRole, self.broker_role)
        self.flush = _enum_setting("flush", FlushDiskType, self.flush)

    @property
    def store_path(self) -> Path:
        return Path(self.store_dir).expanduser()

    @property
    def pull_bytes_per_account(self) -> int:
        """max_inflight_pull_bytes_per_account, by default (0) half of max_inflight_pull_bytes."""
        return self.max_inflight_pull_bytes_per_account or self.max_inflight_pull_bytes // 2

    @property
    def namesrv_addresses(self) -> list[str]:
        return [address.strip() for address in self.namesrv.split(",") if address.strip()]

    @property
    def broker_address(self) -> str:
        return self.advertise_address or self.listen

    @property
    def flight_bind_address(self) -> str | None:
        """Where the Flight data plane listens (docs/data-plane.md): flight_listen, by default
        listen's host on an ephemeral port (HOST:0); None when it is off."""
        if self.flight_listen == FLIGHT_OFF:
            return None
        return self.flight_listen or f"{self.listen.rpartition(':')[0]}:0"

    def flight_advertised_address(self, port: int) -> str:
        """The Flight address routes carry: the advertised (or listen) host, the bound port."""
        return f"{self.broker_address.rpartition(':')[0]}:{port}"

    @property
    def remoting_bind_address(self) -> str | None:
        """Where the remoting port listens: remoting_listen, by default listen's host on an
        ephemeral port (HOST:0, bound by BrokerController before anything names it); None when off."""
        if self.remoting_listen == REMOTING_OFF:
            return None
        return self.remoting_listen or f"{self.listen.rpartition(':')[0]}:0"

    @property
    def remoting_address(self) -> str:
        """What clients reach the remoting port at: its port on the advertised host, if any; "" when
        the port is off or not bound yet (an ephemeral port is known once bound)."""
        if self.remoting_listen in ("", REMOTING_OFF) or self.remoting_listen.endswith(":0"):
            return ""
        if not self.advertise_address:
            return self.remoting_listen
        return f"{self.advertise_address.rpartition(':')[0]}:{self.remoting_listen.rpartition(':')[2]}"

    def validate(self) -> None:
        check_address("listen", self.listen)
        if self.metrics_listen:
            check_address("metrics_listen", self.metrics_listen)
        if self.flight_listen not in ("", FLIGHT_OFF):
            check_address("flight_listen", self.flight_listen)
        if self.remoting_listen not in ("", REMOTING_OFF):
            check_address("remoting_listen", self.remoting_listen)
        if self.advertise_address:
            check_address("advertise_address", self.advertise_address)
        for address in self.namesrv_addresses:
            check_address("namesrv", address)
        check_store_settings("store", self.store)
        if not self.broker_name or not all(c.isalnum() or c in "_-." for c in self.broker_name):
            raise UserError(
                f"broker name {self.broker_name!r} may only contain letters, digits, '_', '-' and '.'"
            )
        self._validate_role()
        _check_positive_ints(self)
        if self.max_pull_bytes >= self.grpc_max_message_bytes:
            raise UserError("max_pull_bytes must be smaller than grpc_max_message_bytes")
        if self.timer_max_pending_per_account > self.timer_max_pending:
            raise UserError("timer_max_pending_per_account must not be larger than timer_max_pending")
        if self.max_inflight_pull_bytes_per_connection > self.max_inflight_pull_bytes:
            raise UserError("max_inflight_pull_bytes_per_connection must not be larger than "
                            "max_inflight_pull_bytes")
        if self.max_inflight_pull_bytes_per_account > self.max_inflight_pull_bytes:
            raise UserError("max_inflight_pull_bytes_per_account must not be larger than "
                            "max_inflight_pull_bytes")
        try:
            parse_delay_levels(self.message_delay_level)
        except ValueError as error:
            raise UserError(f"message_delay_level: {error}") from None

    @property
    def controller_addresses(self) -> tuple[str, ...]:
        return tuple(address.strip() for address in self.controller.split(",") if address.strip())

    def _validate_role(self) -> None:
        if self.controller:
            for address in self.controller_addresses:
                check_address("controller", address)
            if self.broker_role is BrokerRole.SLAVE or self.master:
                raise UserError("with --controller the controller assigns master and slaves: --role names "
                                "the master's mode (SYNC_MASTER or ASYNC_MASTER), and --master is not given")
            return
        if self.min_in_sync_replicas == 1:
            raise UserError("min_in_sync_replicas 1 needs --controller: only the controller's in-sync set "
                            "tells when a SYNC_MASTER may acknowledge alone (without one, give 2 or more)")
        if self.broker_role is BrokerRole.SLAVE:
            if self.broker_id < 1:
                raise UserError(f"a SLAVE needs a broker id of 1 or more, not {self.broker_id}")
            if not self.master:
                raise UserError("a SLAVE needs --master HOST:PORT (its broker group's master)")
            check_address("master", self.master)
        elif self.broker_id != 0 or self.master:
            raise UserError(f"a {self.broker_role.value} has broker id 0 and no --master "
                            f"(got id {self.broker_id}{', master ' + self.master if self.master else ''})")


@dataclass
class NameServerConfig:
    listen: str = "127.0.0.1:9876"
    broker_expiry_ms: int = 120000  # brokerChannelExpiredTime
    broker_scan_interval_ms: int = 10000  # scanNotActiveBroker period
    grpc_max_message_bytes: int = 64 * MiB
    metrics_listen: str = ""  # Prometheus scrape endpoint HOST:PORT (off when empty)
    remoting_listen: str = ""  # RocketMQ 4.x remoting protocol (off when empty)
    remoting_max_frame_bytes: int = 16 * MiB
    remoting_max_connections: int = 4096
    controller: bool = False  # embed the controller (docs/controller.md)
    controller_dir: str = "~/.rmq/controller"  # where the controller keeps its state
    cluster_name: str = DEFAULT_CLUSTER_NAME  # the cluster whose broker groups the controller manages
    controller_failover_timeout_ms: int = 3000  # a master silent this long is replaced
    controller_scan_interval_ms: int = 500  # how often the controller checks for silent masters
    cluster_secret_file: str = ""  # controller: the secret every broker proves its heartbeats with
    etcd: str = ""  # controllers on etcd: HOST:PORT[,HOST:PORT...] of etcd ("" : a JSON file instead)
    etcd_prefix: str = "/rmq"  # the keys of this cluster's controllers (another cluster: another prefix)
    etcd_ca_file: str = ""  # TLS to etcd: its CA (TLS on when this or etcd_cert_file is set)
    etcd_cert_file: str = ""  # TLS client certificate and key for etcd
    etcd_key_file: str = ""
    etcd_user: str = ""  # etcd authentication: user, and a file holding its password
    etcd_password_file: str = ""
    controller_lease_ttl_s: int = 2  # etcd: a dead leading controller is replaced after this

    @property
    def controller_path(self) -> Path:
        return Path(self.controller_dir).expanduser()

    @property
    def etcd_endpoints(self) -> tuple[str, ...]:
        return tuple(endpoint.strip() for endpoint in self.etcd.split(",") if endpoint.strip())

    def validate(self) -> None:
        check_address("listen", self.listen)
        for endpoint in self.etcd_endpoints:
            check_address("etcd", endpoint)
        if self.etcd and not self.controller:
            raise UserError("--etcd keeps the controller's state: it needs --controller")
        if self.etcd and not self.etcd_prefix.startswith("/"):
            raise UserError(f"etcd_prefix must start with '/', not {self.etcd_prefix!r}")
        if self.metrics_listen:
            check_address("metrics_listen", self.metrics_listen)
        if self.remoting_listen:
            check_address("remoting_listen", self.remoting_listen)
        _check_positive_ints(self)


def load_config(config_class: type[C], path: str | None, overrides: dict[str, Any]) -> C:
    """`config_class` built from the file at `path` (YAML or JSON), then `overrides` (flags
    given on the command line, None meaning not given), validated."""
    values = read_config_file(path) if path else {}
    known = {f.name: f for f in dataclasses.fields(config_class)}
    for key, value in values.items():
        if key not in known:
            raise UserError(f"{path}: unknown key {key!r} (known: {', '.join(sorted(known))})")
        _check_type(f"{path}: {key}", known[key], value)
        if key == "store":
            check_store_settings(f"{path}: store", value)
    values.update({key: value for key, value in overrides.items() if value is not None})
    config = config_class(**values)
    config.validate()
    return config


C = TypeVar("C", BrokerConfig, NameServerConfig)


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


def _enum_setting(name: str, kind: type[E], value: E | str) -> E:
    """`value` as a member of `kind` (given as the member or its value); UserError naming `name`
    and the choices otherwise."""
    if isinstance(value, kind):
        return value
    try:
        return kind(value)
    except ValueError:
        choices = [member.value for member in kind]
        listed = " or ".join(map(repr, choices)) if len(choices) == 2 else "one of " + ", ".join(choices)
        raise UserError(f"{name} must be {listed}, not {value!r}") from None


def check_address(name: str, address: str) -> None:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(f"{name} must be HOST:PORT with a port from 1 to 65535, not {address!r}")


def _check_type(name: str, spec: dataclasses.Field[Any], value: Any) -> None:
    types = {"int": int, "float": float, "bool": bool, "str": str, "BrokerRole": str, "FlushDiskType": str}
    expected = types.get(str(spec.type), dict)
    number = expected in (int, float) and not isinstance(value, bool)
    if number and isinstance(value, int | float if expected is float else int):
        return
    if expected in (int, float):
        raise UserError(f"{name} must be {'an integer' if expected is int else 'a number'}, not {value!r}")
    if not isinstance(value, expected):
        raise UserError(f"{name} must be a {expected.__name__}, not {value!r}")


# The `store:` section: MessageStoreConfig fields, except those the broker sets from its own
# settings (store_dir, flush, role, address, max_message_size, the in-sync settings).
_STORE_SET_BY_BROKER = frozenset({"store_dir", "flush_disk_type", "broker_role", "broker_address",
                                  "max_message_size", "min_in_sync_replicas", "ha_max_time_not_caught_up_ms"})
STORE_SETTINGS = {f.name: f for f in dataclasses.fields(MessageStoreConfig)
                  if f.name not in _STORE_SET_BY_BROKER}
_STORE_MAY_BE_ZERO = frozenset({"file_reserved_time_hours",   # 0: expired as soon as a file is full
                                "flush_commit_log_least_pages", "flush_consume_queue_least_pages",
                                "consume_queue_unmap_idle_ms", "delete_commit_log_files_interval_ms",
                                "delete_consume_queue_files_interval_ms"})
# inclusive ranges; disk_max_used_space_ratio outside 10-95 would be clamped silently (diskMaxUsedSpaceRatio)
_STORE_RANGES: dict[str, tuple[float, float]] = {
    "disk_max_used_space_ratio": (10, 95),
    "access_message_in_memory_max_ratio": (1, 100),
    # fractions of the disk; a value above 1 turns the threshold off (no disk is more than full),
    # a value like 90 is a percentage by mistake
    "disk_space_clean_forcibly_ratio": (0.01, 1.5),
    "disk_space_warning_level_ratio": (0.01, 1.5),
    "mapped_file_size_commit_log": (1024, 2**31 - 1),
}


def check_store_settings(name: str, settings: dict[str, Any]) -> None:
    """The `store:` section of a config file: known keys, their types and ranges (one UserError line)."""
    for key, value in settings.items():
        spec = STORE_SETTINGS.get(key)
        if spec is None:
            raise UserError(f"{name}: unknown key {key!r} (known: {', '.join(sorted(STORE_SETTINGS))})")
        _check_type(f"{name}.{key}", spec, value)
        _check_store_range(f"{name}.{key}", key, value)


def _check_store_range(name: str, key: str, value: Any) -> None:
    if key == "delete_when":
        hours = value.split(";")
        if value.strip().lower() != "now" and not all(h.strip().isdigit() and int(h) < 24 for h in hours):
            raise UserError(f"{name} must be 'now' or hours of the day separated by ';' (e.g. '04;16'), "
                            f"not {value!r}")
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        return
    low, high = _STORE_RANGES.get(key, (0 if key in _STORE_MAY_BE_ZERO else 1e-9, float("inf")))
    if not low <= value <= high:
        bound = f"from {low:g} to {high:g}" if high != float("inf") else (
            "at least 0" if low == 0 else "positive")
        raise UserError(f"{name} must be {bound}, not {value!r}")


_MAY_BE_ZERO = frozenset({"broker_id", "controller_master_lease_ms", "max_inflight_pull_bytes_per_account"})


def _check_positive_ints(config: Any) -> None:
    for spec in dataclasses.fields(config):
        value = getattr(config, spec.name)
        if str(spec.type) == "int" and spec.name not in _MAY_BE_ZERO and value <= 0:
            raise UserError(f"{spec.name} must be positive, not {value}")
