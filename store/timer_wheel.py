"""TimerWheel (RocketMQ 5 store/timer/TimerWheel; docs/internals/timer.md §TimerWheel): one
memory-mapped file `<store>/timerwheel` of fixed 32-byte slots, a slot per `precision_ms` of time,
twice as many slots as the longest delay allowed, so a slot is never needed by two rotations at
once. A slot holds the time it stands for (in precision units: a slot left from an earlier rotation
reads as empty), the first and last TimerLog entry of its chain and their count.

The file is created and its blocks reserved (posix_fallocate) at the first timer, not before: a
broker that never holds a timer needs no 16.6 MB wheel, and once reserved no page of it can fault
on a full filesystem (on tmpfs a fault in a sparse file, even a read, is SIGBUS); a full disk is
an OSError (ENOSPC) from `allocate`, which the send path turns into a refusal."""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

from rmq.store.mapped_file import map_reserved
from rmq.store.private_files import make_dirs
from rmq.store.timer_log import NO_ENTRY

SLOT = struct.Struct("<qqqii")   # time (precision units), first entry, last entry, count, magic
SLOT_MAGIC = 0x54494D52          # "TIMR"


@dataclass(frozen=True, slots=True)
class Slot:
    time: int      # deliver_ms // precision_ms of the entries chained here
    first: int
    last: int
    count: int

    @classmethod
    def empty(cls, time: int) -> Slot:
        return cls(time, NO_ENTRY, NO_ENTRY, 0)


class TimerWheel:
    def __init__(self, path: Path, precision_ms: int, max_delay_ms: int) -> None:
        self.path = path
        self.precision_ms = precision_ms
        self.slots_total = 2 * (-(-max_delay_ms // precision_ms) + 1)
        self.length = self.slots_total * SLOT.size
        self._map: mmap.mmap | None = None
        make_dirs(path.parent)
        # No wheel yet, or one of another geometry (timer_precision_ms or timer_max_delay_s
        # changed, emptied here): `fresh` tells the owner to chain the pending TimerLog entries again.
        size = path.stat().st_size if path.exists() else 0
        self.fresh = size != self.length
        if self.fresh:
            path.unlink(missing_ok=True)
        else:
            self.allocate()

    @property
    def allocated(self) -> bool:
        return self._map is not None

    def allocate(self) -> None:
        """Create the file with its blocks reserved and map it (nothing when done already).
        Raises OSError (ENOSPC), leaving no file, when the filesystem has no room for it."""
        if self._map is None:
            self._map = map_reserved(self.path, self.length)

    def slot_time(self, deliver_ms: int) -> int:
        return deliver_ms // self.precision_ms

    def get(self, time: int) -> Slot:
        """The slot standing for `time` (precision units); empty when it holds another rotation's
        (or before the first timer: no file yet)."""
        if self._map is None:
            return Slot.empty(time)
        stored, first, last, count, magic = SLOT.unpack_from(self._map, (time % self.slots_total) * SLOT.size)
        if magic != SLOT_MAGIC or stored != time:
            return Slot.empty(time)
        return Slot(time, first, last, count)

    def put(self, slot: Slot) -> None:
        """Raises OSError when the wheel is not allocated yet and the filesystem has no room."""
        self.allocate()
        assert self._map is not None
        SLOT.pack_into(self._map, (slot.time % self.slots_total) * SLOT.size,
                       slot.time, slot.first, slot.last, slot.count, SLOT_MAGIC)

    def flush(self) -> None:
        if self._map is not None:
            self._map.flush()

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None
