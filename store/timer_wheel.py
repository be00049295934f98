"""TimerWheel (RocketMQ 5 store/timer/TimerWheel; docs/internals/timer.md §TimerWheel): one
memory-mapped file `<store>/timerwheel` of fixed 32-byte slots, a slot per `precision_ms` of time,
twice as many slots as the longest delay allowed, so a slot is never needed by two rotations at
once. A slot holds the time it stands for (in precision units: a slot left from an earlier rotation
reads as empty), the first and last TimerLog entry of its chain and their count."""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from rmq.store.private_files import make_dirs, open_private
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
        length = self.slots_total * SLOT.size
        make_dirs(path.parent)
        fd = open_private(path, os.O_RDWR | os.O_CREAT)
        try:
            # A wheel of another geometry (timer_precision_ms or timer_max_delay_s changed) is
            # emptied: `fresh` tells the owner to chain the pending TimerLog entries again.
            self.fresh = os.fstat(fd).st_size != length
            if self.fresh:
                os.ftruncate(fd, 0)
                os.ftruncate(fd, length)
            self._map = mmap.mmap(fd, length)
        finally:
            os.close(fd)

    def slot_time(self, deliver_ms: int) -> int:
        return deliver_ms // self.precision_ms

    def get(self, time: int) -> Slot:
        """The slot standing for `time` (precision units); empty when it holds another rotation's."""
        stored, first, last, count, magic = SLOT.unpack_from(self._map, (time % self.slots_total) * SLOT.size)
        if magic != SLOT_MAGIC or stored != time:
            return Slot.empty(time)
        return Slot(time, first, last, count)

    def put(self, slot: Slot) -> None:
        SLOT.pack_into(self._map, (slot.time % self.slots_total) * SLOT.size,
                       slot.time, slot.first, slot.last, slot.count, SLOT_MAGIC)

    def flush(self) -> None:
        self._map.flush()

    def close(self) -> None:
        self._map.close()
