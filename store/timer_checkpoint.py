"""TimerCheckpoint (RocketMQ 5 store/timer/TimerCheckpoint; docs/internals/timer.md §Checkpoint):
how far the timer queue has been put on the wheel and how far the wheel has been delivered,
in `<store>/config/timerCheck.json`, replaced whole (fsync'd temporary file + rename)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from rmq.store.errors import StoreError
from rmq.store.private_files import write_durably


@dataclass
class TimerCheckpoint:
    enqueue_offset: int = 0    # the next timer-queue offset to put on the wheel
    read_time_ms: int = 0      # every slot before this time is delivered (0: none read yet)
    slave: bool = False        # written by a slave: deliveries past read_time_ms may exist elsewhere

    @classmethod
    def load(cls, path: Path) -> TimerCheckpoint:
        try:
            content = json.loads(path.read_text())
            return cls(int(content["enqueue_offset"]), int(content["read_time_ms"]), bool(content["slave"]))
        except FileNotFoundError:
            return cls()
        except (ValueError, KeyError, TypeError) as error:
            raise StoreError(f"{path} is not a timer checkpoint: {error}") from None

    def save(self, path: Path) -> None:
        write_durably(path, json.dumps(asdict(self)).encode())
