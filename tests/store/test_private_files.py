"""Store files and directories are their owner's alone (0600 / 0700) whatever the umask: other
local users read neither message bodies nor offsets (SECURITY.md)."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmq.store import MessageStore
from rmq.store.private_files import make_dirs, write_durably
from tests.store.conftest import message, small_config, wait_dispatched


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    previous = os.umask(0o022)   # the usual default: files 0644, directories 0755
    try:
        yield
    finally:
        os.umask(previous)


def modes(root: Path) -> dict[str, int]:
    found = {".": stat.S_IMODE(root.stat().st_mode)}
    for path in root.rglob("*"):
        found[str(path.relative_to(root))] = stat.S_IMODE(path.stat().st_mode)
    return found


def test_a_store_creates_its_files_0600_and_directories_0700(tmp_path: Path, permissive_umask) -> None:
    root = tmp_path / "not" / "yet" / "there"
    store = MessageStore(small_config(root))
    store.start()
    try:
        for index in range(100):   # 8 KiB CommitLog files: several, with ConsumeQueues and the index
            stored = store.put_message(message(queue_id=index % 2, body=b"s%d" % index, KEYS=f"k{index}"))
            assert stored.ok
        wait_dispatched(store)
    finally:
        store.shutdown()
    found = modes(tmp_path / "not")
    assert any(name.startswith("yet/there/commitlog/") for name in found)
    assert any(name.startswith("yet/there/consumequeue/TopicTest/1/") for name in found)
    assert any(name.startswith("yet/there/index/") for name in found)
    loose = {name: f"{mode:04o}" for name, mode in found.items() if mode & 0o077}
    assert loose == {}


def test_durable_writes_and_directories_are_private(tmp_path: Path, permissive_umask) -> None:
    make_dirs(tmp_path / "a" / "b")
    write_durably(tmp_path / "a" / "b" / "c" / "file.json", b"{}")
    assert (tmp_path / "a" / "b" / "c" / "file.json").read_bytes() == b"{}"
    assert {name: f"{mode:04o}" for name, mode in modes(tmp_path / "a").items()} == {
        ".": "0700", "b": "0700", "b/c": "0700", "b/c/file.json": "0600"}


def test_two_threads_writing_the_same_file_at_once_both_succeed(tmp_path: Path) -> None:
    """A periodic persist on the executor and the shutdown's persist may overlap (a broker in
    controller mode ends a term with a shutdown): neither loses its temporary file."""
    path = tmp_path / "config" / "offsets.json"
    errors: list[BaseException] = []

    def write(content: bytes) -> None:
        try:
            for _ in range(200):
                write_durably(path, content)
        except OSError as error:
            errors.append(error)

    writers = [threading.Thread(target=write, args=(content,)) for content in (b"{1}", b"{2}")]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    assert errors == []
    assert path.read_bytes() in (b"{1}", b"{2}")
    assert [p.name for p in path.parent.iterdir()] == ["offsets.json"]


APPEND_PAST_A_FILE_SIZE_LIMIT = """
import resource, signal, sys
from pathlib import Path
from rmq.store.private_files import append_durably
path = Path(sys.argv[1])
append_durably(path, b"first record\\n")
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)     # a write past the limit fails with EFBIG instead
resource.setrlimit(resource.RLIMIT_FSIZE, (path.stat().st_size + 5, resource.RLIM_INFINITY))
try:
    append_durably(path, b"second record, longer than what the limit leaves\\n")
except OSError as error:
    print(error.errno)
"""


def test_an_append_that_fails_midway_leaves_no_half_record(tmp_path: Path) -> None:
    """append_durably (the broker's journals: topics, pop state, transactions): a write that
    fails after part of the record reached the file is cut off again, so the next record does not
    follow half a line. The failure is real: a file size limit the first 5 bytes fit under."""
    path = tmp_path / "table.journal"
    result = subprocess.run([sys.executable, "-c", APPEND_PAST_A_FILE_SIZE_LIMIT, str(path)],
                            capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.split() == [str(errno.EFBIG)]
    assert path.read_bytes() == b"first record\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
