"""ServiceThread: a daemon loop woken early by `wakeup()` (RocketMQ ServiceThread)."""

from __future__ import annotations

import logging
import threading

log = logging.getLogger(__name__)

ERROR_RETRY_S = 1.0


class ServiceThread:
    name = "service"

    def __init__(self) -> None:
        self._wakeup = threading.Event()
        self.stopped = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"rmq-store-{self.name}", daemon=True)
        self._thread.start()

    def wakeup(self) -> None:
        self._wakeup.set()

    def wait_for_running(self, interval_s: float) -> None:
        self._wakeup.wait(interval_s)
        self._wakeup.clear()

    def shutdown(self) -> None:
        self.stopped = True
        self._wakeup.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self._thread = None

    def _run(self) -> None:
        while not self.stopped:
            try:
                self.run_once()
            except Exception:
                log.exception("%s service has exception", self.name)
                self.wait_for_running(ERROR_RETRY_S)

    def run_once(self) -> None:
        raise NotImplementedError
