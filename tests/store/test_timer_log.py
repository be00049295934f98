"""TimerLog segments: entries are written by pwrite and read by pread, durable at `flush`, and
never mapped into the broker (docs/internals/timer.md §TimerLog)."""

from __future__ import annotations

from pathlib import Path

from rmq.store.timer_log import ENTRY_SIZE, EntryState, TimerEntry, TimerLog


def mapped_paths() -> set[str]:
    with open("/proc/self/maps") as maps:
        return {line.split()[-1] for line in maps if len(line.split()) >= 6}


def test_entries_are_kept_in_files_never_mapped(tmp_path: Path) -> None:
    log = TimerLog(tmp_path / "timerlog", entries_per_segment=8)
    entries = [TimerEntry(index, index - 1, 1_000 + index, 64 * index, 200, 7, EntryState.PENDING, 9)
               for index in range(20)]   # three segments
    for entry in entries:
        log.write(entry)
    log.set_state(5, EntryState.DELIVERED)
    log.flush()
    segments = sorted(str(path) for path in (tmp_path / "timerlog").iterdir())
    assert len(segments) == 3 and not mapped_paths() & set(segments)
    assert all(Path(path).stat().st_size == 8 * ENTRY_SIZE for path in segments)   # reserved whole
    log.close()
    reopened = TimerLog(tmp_path / "timerlog", entries_per_segment=8)   # what flush made durable
    assert reopened.read(4) == entries[4]
    assert reopened.read(5).state is EntryState.DELIVERED
    assert reopened.read(20) is None and reopened.read(24) is None   # never written / no segment
    assert reopened.pending().indexes.tolist() == [i for i in range(20) if i != 5]
    assert reopened.delete_below(16) == 2 and reopened.read(4) is None and reopened.read(19) == entries[19]
    reopened.close()
