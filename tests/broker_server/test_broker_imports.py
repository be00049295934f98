"""What a broker process loads: pandas is not one of its dependencies, and importing it (pyarrow does
so on the quiet for `RecordBatch.from_pylist` and `pa.array`) costs the broker ~200 memory maps and
tens of MiB, which the many-topics reliability scenario bounds (max mapped files + the rest)."""

from __future__ import annotations

import subprocess
import sys

STARTS_A_BROKER = (
    "import sys\n"
    "import rmq.broker_server.broker_controller, rmq.broker_server.rmq_v1.flight_service\n"
    "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pandas')[:3])\n"
)


def test_the_broker_and_its_flight_service_import_no_pandas() -> None:
    loaded = subprocess.run([sys.executable, "-c", STARTS_A_BROKER], capture_output=True, text=True,
                            check=True, timeout=120).stdout.strip()
    assert loaded == "[]"
