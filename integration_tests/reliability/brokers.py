"""Brokers with extra settings for the scenarios: small files, fast retention, low disk
thresholds, written to a `--config` file (keys as in rmq.broker_server.config.BrokerConfig,
store keys as in store.MessageStoreConfig)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from testing import processes


def configured_broker(tmp_path: Path, flush: str = "sync", store: dict[str, Any] | None = None,
                      name: str = "broker-a", **settings: Any) -> processes.ServerProcess:
    """A broker on a free port whose `--config` file holds `settings` and `store`."""
    path = tmp_path / f"{name}-config.json"
    path.write_text(json.dumps({**settings, "store": store or {}}))
    return processes.broker(tmp_path, name=name, flush=flush, extra=["--config", str(path)])
