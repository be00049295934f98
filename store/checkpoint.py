"""StoreCheckpoint: the `checkpoint` file with the last flush timestamps (spec store §4).

4096 bytes: physicMsgTimestamp @0, logicsMsgTimestamp @8, indexMsgTimestamp @16 (big-endian longs).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from rmq.store.private_files import open_private

CHECKPOINT_FILE_SIZE = 4096
_LAYOUT = struct.Struct(">qqq")


class StoreCheckpoint:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.physic_msg_timestamp = 0
        self.logics_msg_timestamp = 0
        self.index_msg_timestamp = 0
        if path.exists():
            data = path.read_bytes()
            if len(data) >= _LAYOUT.size:
                (self.physic_msg_timestamp, self.logics_msg_timestamp,
                 self.index_msg_timestamp) = _LAYOUT.unpack_from(data)

    def min_timestamp(self) -> int:
        """getMinTimestamp: min(physic, logics) - 3 s (records older are surely dispatched and flushed)."""
        return max(min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000, 0)

    def flush(self) -> None:
        data = _LAYOUT.pack(self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp)
        fd = open_private(self.path, os.O_RDWR | os.O_CREAT)
        try:
            if os.fstat(fd).st_size != CHECKPOINT_FILE_SIZE:
                os.ftruncate(fd, CHECKPOINT_FILE_SIZE)
            os.pwrite(fd, data, 0)
            os.fsync(fd)
        finally:
            os.close(fd)
