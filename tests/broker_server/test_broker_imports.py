"""What a broker process loads: pandas is not one of its dependencies, and importing it (pyarrow does
so on the quiet for `RecordBatch.from_pylist` and `pa.array`) costs the broker ~200 memory maps and
tens of MiB, which the many-topics reliability scenario bounds (max mapped files + the rest)."""

from __future__ import annotations

import subprocess
import sys

from tests.connector.test_message_decoder import record

STARTS_A_BROKER = (
    "import sys\n"
    "import rmq.broker_server.broker_controller, rmq.broker_server.rmq_v1.flight_service\n"
    "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pandas')[:3])\n"
)
# what the Flight data plane does for every batch it serves: the records' columns, with and
# without properties (a tag, a key, a property without value)
SERVES_A_FLIGHT_BATCH = (
    "import sys\n"
    "import numpy as np\n"
    "import rmq.broker_server.rmq_v1.flight_service\n"
    "from rmq.record_batch import decode_records\n"
    "for records in sys.argv[1:]:\n"
    "    parts = [bytes.fromhex(part) for part in records.split(',')]\n"
    "    decode_records(np.frombuffer(b''.join(parts), dtype=np.uint8),\n"
    "                   np.array([len(part) for part in parts], dtype=np.int64), 'broker-a')\n"
    "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pandas')[:3])\n"
)


def _pandas_loaded(script: str, *args: str) -> str:
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                          check=True, timeout=120).stdout.strip()


def test_the_broker_and_its_flight_service_import_no_pandas() -> None:
    assert _pandas_loaded(STARTS_A_BROKER) == "[]"


def test_serving_flight_batches_loads_no_pandas() -> None:
    plain = ",".join(record(body=b"x" * n, queue_offset=n).hex() for n in range(3))
    with_properties = ",".join([record(properties={"TAGS": "a", "KEYS": "k1"}).hex(),
                                record(raw_properties="TAGS\x01b\x02lonely\x02").hex(), record().hex()])
    assert _pandas_loaded(SERVES_A_FLIGHT_BATCH, plain, with_properties) == "[]"
