"""Where a delivery's time goes (row 4's profile, issue 29 item 1): bench.delivery_latency's
path (Producer.send → PushConsumer listener over the broker's remoting port, one message every
20 ms) against a broker whose remoting, send, put, wake, read and answer steps write a
timestamp at entry and exit, beside the client's frame writes, reader thread and listener.
Both processes stamp with time.perf_counter (CLOCK_MONOTONIC: one clock across processes).
Prints each step's median time after Producer.send was called (the first stamp of each step
in each delivery).

    python -m bench.delivery_timeline [--samples N]

A diagnostic, not a benchmark row: each stamp costs a few microseconds."""

from __future__ import annotations

import os
import queue
import sys
import time
from pathlib import Path

from bench import delivery_latency, wake_timeline
from bench.environment import Environment, Scale, _running
from bench.wake_timeline import SEND_RETURNED, START, Trace, step_medians
from rmq.broker_server.remoting import broker_processor, remoting_server
from rmq.connector import ConsumeConcurrentlyStatus, Message, Producer, PushConsumer, remoting_client
from rmq.connector.client import RmqClient
from rmq.connector.consume_message_concurrently_service import ConsumeMessageConcurrentlyService
from rmq.connector.consumer_impl import ConsumerImpl
from testing import processes

LISTENER = "client: listener called"


REMOTING_STEPS = (
    (broker_processor.BrokerRemotingProcessor, "process", "broker: remoting request"),
    (remoting_server.Channel, "write", "broker: answer written"),
)


def serve(trace_file: Path, broker_args: list[str]) -> int:
    """Run `rmq <broker_args>` in this process with the wake path's broker steps and the
    remoting port's traced."""
    return wake_timeline.serve(trace_file, broker_args, REMOTING_STEPS)


def timeline(samples: int) -> list[tuple[str, float, int]]:
    """(step, median ms after Producer.send was called, deliveries seen) in time order."""
    env = Environment(Scale.quick())
    trace_file = env.directory("delivery-timeline") / "trace.txt"
    trace = Trace(trace_file)
    trace.wrap(remoting_client.RemotingConnection, "_write", "client: frame written")
    trace.wrap(remoting_client.RemotingConnection, "_dispatch", "client: reader thread handles an answer")
    trace.wrap(ConsumerImpl, "_on_pull", "client: pull callback")
    trace.wrap(ConsumerImpl, "pull_message", "client: next pull (pull thread)")
    trace.wrap(ConsumeMessageConcurrentlyService, "run", "client: consume thread runs")
    server = processes.broker(env.directory("delivery-timeline"), flush="async")
    server.command = [sys.executable, "-m", "bench.delivery_timeline", "--serve", str(trace_file)]
    received: queue.SimpleQueue[float] = queue.SimpleQueue()

    def listener(messages: list, context: object) -> ConsumeConcurrentlyStatus:
        trace.event(LISTENER)
        received.put(time.perf_counter())
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    try:
        with _running(server):
            with RmqClient(server.address) as admin:
                admin.create_topic(delivery_latency.TOPIC, queues=delivery_latency.QUEUES)
            consumer = PushConsumer("delivery-timeline", server.address)
            consumer.subscribe(delivery_latency.TOPIC)
            consumer.register_message_listener(listener)
            producer = Producer(server.address)
            consumer.start()
            producer.start()
            try:
                delivery_latency.wait_first_delivery(producer, delivery_latency.TOPIC, received)
                os.truncate(trace_file, 0)
                for _ in range(samples):
                    time.sleep(delivery_latency.SETTLE_S)
                    trace.event(START)
                    producer.send(Message(delivery_latency.TOPIC, b"x" * 100))
                    trace.event(SEND_RETURNED)
                    received.get(timeout=30)
            finally:
                producer.shutdown()
                consumer.shutdown()
        return step_medians(trace_file.read_text().splitlines(), _done)
    finally:
        env.close()


def _done(delivery: dict[str, float]) -> bool:
    """The listener was called and the send returned: later stamps belong to the next delivery."""
    return LISTENER in delivery and SEND_RETURNED in delivery


def main() -> int:
    return wake_timeline.timeline_main(__doc__, serve, timeline, "Producer.send was called", "deliveries")


if __name__ == "__main__":
    sys.exit(main())
