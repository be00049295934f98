"""MessageStoreConfig: every tunable of the store, RocketMQ names in snake_case (spec store §24)."""

from __future__ import annotations

import enum
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from rmq.store.errors import StoreError


class FlushDiskType(enum.Enum):
    SYNC = "sync"     # group commit: a put returns after the flush covering it (spec store §10.1)
    ASYNC = "async"   # a flush thread every flush_interval_commit_log_ms (spec store §10.2)


class BrokerRole(enum.Enum):
    """RocketMQ BrokerRole (docs/replication.md)."""

    ASYNC_MASTER = "ASYNC_MASTER"   # a put returns once stored; slaves copy in the background
    SYNC_MASTER = "SYNC_MASTER"     # a put returns once a slave holds it too (HAService.wait_for_slave)
    SLAVE = "SLAVE"   # refuses puts; getMessage keeps the requested offset unless offset_check_in_slave


CQ_STORE_UNIT_SIZE = 20


@dataclass
class MessageStoreConfig:
    store_dir: str | Path
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    offset_check_in_slave: bool = False
    # Store host written into every record and into message ids: IPv4 "host:port".
    broker_address: str = "127.0.0.1:10911"

    # File sizes. RocketMQ uses 1 GiB CommitLog files; 128 MiB keeps small brokers small.
    mapped_file_size_commit_log: int = 128 * 1024 * 1024
    mapped_file_size_consume_queue: int = 300_000 * CQ_STORE_UNIT_SIZE
    max_message_size: int = 4 * 1024 * 1024

    # Flush (spec store §10): sync group commit, async interval flush, consume-queue flush.
    sync_flush_timeout_ms: int = 5000
    flush_interval_commit_log_ms: int = 500
    flush_commit_log_least_pages: int = 4
    flush_commit_log_thorough_interval_ms: int = 10_000
    flush_interval_consume_queue_ms: int = 1000
    flush_consume_queue_least_pages: int = 2
    flush_consume_queue_thorough_interval_ms: int = 60_000

    # Mapped ConsumeQueue files (MappedFileLru, not in RocketMQ): each mapping holds a map and an
    # fd. At most this many at once (least recently used unmapped first; active queues stay
    # mapped below it), and none not accessed for the idle time (checked after each flush).
    max_mapped_consume_queue_files: int = 4096
    consume_queue_unmap_idle_ms: int = 120_000

    # Index (spec store §7). RocketMQ's 5,000,000 slots / 20,000,000 entries make 420 MB
    # files; these defaults make 42 MB (sparse) files.
    message_index_enable: bool = True
    max_hash_slot_num: int = 500_000
    max_index_num: int = 2_000_000

    # Pull limits (spec consumer-pull-rebalance §12.2, isTheBatchFull) when the caller gives none.
    max_transfer_bytes: int = 3 * 1024 * 1024
    access_message_in_memory_max_ratio: int = 40

    # Replication (RocketMQ 5 minInSyncReplicas, haMaxTimeSlaveNotCatchup; docs/controller.md).
    # A SYNC_MASTER acknowledges once min_in_sync_replicas - 1 slaves (and, in controller mode,
    # every slave of the in-sync set) hold a put; 1 (controller mode only): the master alone once
    # the controller's in-sync set is the master alone.
    min_in_sync_replicas: int = 2
    # a slave behind the master's end for longer is not in sync (it leaves the in-sync set)
    ha_max_time_not_caught_up_ms: int = 15_000

    # Recovery (spec store §9).
    check_crc_on_recover: bool = True

    # Retention (spec store §11).
    file_reserved_time_hours: float = 72
    delete_when: str = "04"               # hours of the day separated by ";", or "now"
    clean_resource_interval_ms: int = 10_000
    delete_commit_log_files_interval_ms: int = 100
    delete_consume_queue_files_interval_ms: int = 100
    destroy_mapped_file_interval_forcibly_ms: int = 120_000
    disk_max_used_space_ratio: int = 75
    disk_space_clean_forcibly_ratio: float = 0.85
    disk_space_warning_level_ratio: float = 0.90

    def __post_init__(self) -> None:
        self.store_dir = Path(self.store_dir)
        if self.mapped_file_size_consume_queue % CQ_STORE_UNIT_SIZE:
            raise StoreError(
                f"mapped_file_size_consume_queue must be a multiple of {CQ_STORE_UNIT_SIZE}, "
                f"got {self.mapped_file_size_consume_queue}"
            )
        if self.max_mapped_consume_queue_files < 1 or self.consume_queue_unmap_idle_ms < 0:
            raise StoreError(f"max_mapped_consume_queue_files must be at least 1 and "
                             f"consume_queue_unmap_idle_ms at least 0, got "
                             f"{self.max_mapped_consume_queue_files} and {self.consume_queue_unmap_idle_ms}")
        if self.min_in_sync_replicas < 1 or self.ha_max_time_not_caught_up_ms < 1:
            raise StoreError(f"min_in_sync_replicas and ha_max_time_not_caught_up_ms must be at least 1, got "
                             f"{self.min_in_sync_replicas} and {self.ha_max_time_not_caught_up_ms}")
        if self.mapped_file_size_commit_log < 1024:
            raise StoreError(f"mapped_file_size_commit_log must be at least 1024, got "
                             f"{self.mapped_file_size_commit_log}")
        self.store_host_bytes()  # validate early

    def store_host_bytes(self) -> bytes:
        """The 8-byte store host of records and message ids: IPv4 address + port as int."""
        host, _, port = self.broker_address.rpartition(":")
        try:
            address = ipaddress.IPv4Address(host or "127.0.0.1")
            return address.packed + int(port).to_bytes(4, "big")
        except ValueError as error:
            raise StoreError(f"broker_address must be IPv4 host:port, got {self.broker_address!r}") from error

    def disk_max_used_ratio(self) -> float:
        """diskMaxUsedSpaceRatio clamped to [10, 95] percent, as a fraction."""
        return min(max(self.disk_max_used_space_ratio, 10), 95) / 100.0
