"""Expired-file deletion (spec store §11, TV15, TV16): CleanCommitLogService by age, time of day
and disk usage, then CleanConsumeQueueService for consume queues and index files."""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rmq.store.config import MessageStoreConfig
from rmq.store.service_thread import ServiceThread

log = logging.getLogger(__name__)

HOUR_MS = 60 * 60 * 1000


@dataclass(frozen=True)
class DiskDecision:
    disk_full: bool            # mark the store not writeable
    clean_immediately: bool    # delete regardless of age
    space_to_delete: bool      # usage above diskMaxUsedSpaceRatio (or unreadable)


def decide_disk_space(physic_ratio: float, config: MessageStoreConfig) -> DiskDecision:
    """CleanCommitLogService#isSpaceToDelete: warning level → disk full + clean at once,
    force-clean level → clean at once; a ratio < 0 (unreadable) counts as full."""
    disk_full = physic_ratio > config.disk_space_warning_level_ratio
    clean_immediately = disk_full or physic_ratio > config.disk_space_clean_forcibly_ratio
    space = physic_ratio < 0 or physic_ratio > config.disk_max_used_ratio()
    return DiskDecision(disk_full, clean_immediately, space)


def disk_used_ratio(path: Path) -> float:
    """Used fraction of the partition holding `path`; -1 when it cannot be read."""
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return -1.0
    return usage.used / usage.total if usage.total else -1.0


def is_time_to_delete(delete_when: str, hour: int | None = None) -> bool:
    """deleteWhen: hours of the day separated by ';' ("04"), or "now"."""
    if delete_when.strip().lower() == "now":
        return True
    hour = time.localtime().tm_hour if hour is None else hour
    return any(part.strip().isdigit() and int(part) == hour for part in delete_when.split(";"))


def expired_time_ms(config: MessageStoreConfig) -> float:
    return config.file_reserved_time_hours * HOUR_MS


class CleanFilesService(ServiceThread):
    """Runs the clean-up every clean_resource_interval_ms (DefaultMessageStore#cleanFilesPeriodically)."""

    name = "clean-files"

    def __init__(self, clean: Callable[[], object], interval_ms: int) -> None:
        super().__init__()
        self.clean = clean
        self.interval_ms = interval_ms

    def run_once(self) -> None:
        self.wait_for_running(self.interval_ms / 1000)
        if not self.stopped:
            self.clean()
