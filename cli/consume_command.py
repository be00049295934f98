"""`rmq consume`: print a topic's messages as a member of a consumer group (docs/manual/cli.md).

The command is a PushConsumer (consumer-pull-rebalance §4-§16): several `rmq consume TOPIC
--group g` processes split the topic's queues by allocation, `--orderly` consumes each queue
under its broker lock (one queue at a time, in offset order), `--from` applies where the group
has no offset, and a broker restart is ridden out like any consumer does.

Only what the reader got counts as consumed: messages go out one at a time (one consume
thread), and a message is acknowledged once its line was written and, when stdout is a pipe,
read from the pipe (FIONREAD down to 0). So `| head -3` commits 3 offsets; a broken pipe, the
`--max-messages` limit, `--idle-timeout`, SIGINT or SIGTERM stop the consumer, which persists
the acknowledged offsets and leaves the group before exiting 0.
"""

from __future__ import annotations

import argparse
import base64
import fcntl
import json
import logging
import os
import select
import signal
import stat
import sys
import termios
import threading
import time
from array import array
from collections.abc import Sequence
from typing import Any, TextIO

from rmq.cli.parser import Subcommands
from rmq.command_line import UserError, positive_float, positive_int
from rmq.connector.client import RmqClient
from rmq.connector.message import MessageExt
from rmq.connector.message_listener import ConsumeConcurrentlyContext, ConsumeConcurrentlyStatus
from rmq.connector.message_listener_orderly import ConsumeOrderlyContext, ConsumeOrderlyStatus
from rmq.connector.push_consumer import PushConsumer
from rmq.subscription import MessageSelector

DEFAULT_GROUP = "rmq-cli"
FROM_ALIASES = {"earliest": "first", "latest": "last"}
DRAIN_POLL_S = 0.0005          # how often a pipe is checked for the reader having taken a line
WAIT_STEP_S = 0.1


def add_parser(commands: Subcommands) -> argparse.ArgumentParser:
    consume = commands.add_parser("consume", help="print messages as a member of a consumer group")
    consume.add_argument("topic")
    consume.add_argument("--group", default=DEFAULT_GROUP,
                         help=f"consumer group ({DEFAULT_GROUP}); processes of one group split the queues")
    consume.add_argument("--from", dest="start", type=start_position, default=("last", None),
                         metavar="first|last|timestamp:MS",
                         help="where a queue the group never committed starts (last; earliest/latest "
                              "are first/last)")
    consume.add_argument("--orderly", action="store_true",
                         help="consume each queue under its broker lock, in offset order")
    consume.add_argument("--max-messages", type=positive_int, help="exit after N messages")
    consume.add_argument("--idle-timeout", type=positive_float, metavar="SECONDS",
                         help="exit after SECONDS without a message")
    selector = consume.add_mutually_exclusive_group()
    selector.add_argument("--sub", default="*", metavar="TAGEXPR", help="tag filter: '*' or 'TagA || TagB'")
    selector.add_argument("--sql", metavar="EXPR",
                          help="SQL92 filter on message properties, evaluated by the broker")
    consume.add_argument("--json", action="store_true",
                         help="one JSON object per message (body as UTF-8 when valid, else base64)")
    return consume


def start_position(text: str) -> tuple[str, int | None]:
    """`first`, `last` or `timestamp:MS` (epoch milliseconds)."""
    text = FROM_ALIASES.get(text, text)
    if text in ("first", "last"):
        return text, None
    kind, _, value = text.partition(":")
    if kind == "timestamp" and value.isdigit():
        return "timestamp", int(value)
    raise argparse.ArgumentTypeError(f"expected first, last or timestamp:MS, got {text!r}")


def message_record(message: MessageExt) -> dict[str, Any]:
    """The --json line of a message: every property (user and system ones, as RocketMQ's
    MessageExt shows them), the body as UTF-8 text when it is valid UTF-8, else base64."""
    try:
        body, encoding = message.body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        body, encoding = base64.b64encode(message.body).decode("ascii"), "base64"
    return {"topic": message.topic, "broker_name": message.broker_name, "queue_id": message.queue_id,
            "queue_offset": message.queue_offset, "msg_id": message.msg_id, "tags": message.tags,
            "keys": message.keys, "store_timestamp": message.store_timestamp,
            "reconsume_times": message.reconsume_times, "properties": dict(message.properties),
            "body": body, "body_encoding": encoding}


def one_line(body: bytes) -> str:
    """A body as one line of text (invalid UTF-8 replaced, line breaks escaped)."""
    return body.decode("utf-8", errors="replace").replace("\r", "\\r").replace("\n", "\\n")


HEADER = "QUEUE OFFSET TAGS KEYS BODY"     # message_line's columns


def message_line(message: MessageExt) -> str:
    """`queue_id offset tags keys body` (dashes for empty tags / keys): HEADER's columns."""
    return (f"{message.queue_id} {message.queue_offset} {message.tags or '-'} {message.keys or '-'} "
            f"{one_line(message.body)}")


class Printer:
    """Writes one message at a time to `out`; `deliver` says whether the reader got it."""

    def __init__(self, out: TextIO, json_lines: bool, max_messages: int | None) -> None:
        self.out = out
        self.json_lines = json_lines
        self.max_messages = max_messages
        self.count = 0
        self.last_activity = time.monotonic()
        self.done = threading.Event()      # the limit was reached, or the reader went away
        self.broken = False
        try:
            self._pipe = stat.S_ISFIFO(os.fstat(out.fileno()).st_mode)
        except (OSError, ValueError):   # io.UnsupportedOperation: not a file (captured output)
            self._pipe = False

    def deliver(self, message: MessageExt) -> bool:
        if self.done.is_set():
            return False
        text = json.dumps(message_record(message)) if self.json_lines else message_line(message)
        if not self.json_lines and not self.count:
            # the columns, before the first line, on stderr: `| head -3` and `| wc -l` see messages only
            print(HEADER, file=sys.stderr, flush=True)
        try:
            self.out.write(text + "\n")
            self.out.flush()
            if self._pipe and not self._drained():
                raise BrokenPipeError
        except BrokenPipeError:
            self.broken = True
            self.done.set()
            return False
        self.count += 1
        self.last_activity = time.monotonic()
        if self.max_messages is not None and self.count >= self.max_messages:
            self.done.set()
        return True

    def _drained(self) -> bool:
        """Wait until the pipe's reader took everything written; False when it closed its end."""
        fd = self.out.fileno()
        unread = array("i", [0])
        poller = select.poll()
        poller.register(fd, select.POLLERR)
        while True:
            fcntl.ioctl(fd, termios.FIONREAD, unread)
            if unread[0] == 0:
                return True
            if poller.poll(0):
                return False
            time.sleep(DRAIN_POLL_S)


def consume(client: RmqClient, args: argparse.Namespace) -> int:
    try:
        selector = MessageSelector.by_sql(args.sql) if args.sql else MessageSelector.by_tag(args.sub)
    except ValueError as error:
        raise UserError(f"{'--sql' if args.sql else '--sub'}: {error}") from None
    start, timestamp = args.start
    logging.basicConfig(level=logging.WARNING, format="rmq: warning: %(message)s")
    for service in ("consume_message_concurrently_service", "consume_message_orderly_service"):
        # halt() drops the queues on purpose: their "dropped" warnings say nothing to a CLI user
        logging.getLogger(f"rmq.connector.{service}").setLevel(logging.ERROR)
    printer = Printer(sys.stdout, args.json, args.max_messages)
    try:
        consumer = PushConsumer(args.group, client.endpoints, client=client, consume_from=start,
                                consume_timestamp=timestamp, consume_thread_max=1)
    except ValueError as error:
        raise UserError(f"--group: {error}") from None
    consumer.subscribe(args.topic, selector)

    def halt() -> None:
        """Nothing more is acknowledged: what is in flight is consumed again by the next owner."""
        for pq in list(consumer.rebalance_impl.process_queue_table.values()):
            pq.dropped = True

    def deliver_all(messages: Sequence[MessageExt]) -> bool:
        if all(printer.deliver(m) for m in messages):
            return True
        halt()
        return False

    if args.orderly:
        def orderly(messages: Sequence[MessageExt], context: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
            ok = deliver_all(messages)
            return ConsumeOrderlyStatus.SUCCESS if ok else ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT

        consumer.register_message_listener(orderly, orderly=True)
    else:
        def concurrently(messages: Sequence[MessageExt], context: ConsumeConcurrentlyContext
                         ) -> ConsumeConcurrentlyStatus:
            ok = deliver_all(messages)
            return (ConsumeConcurrentlyStatus.CONSUME_SUCCESS if ok
                    else ConsumeConcurrentlyStatus.RECONSUME_LATER)

        consumer.register_message_listener(concurrently)
    stop = threading.Event()
    previous = {signum: signal.signal(signum, lambda *_: stop.set())
                for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        consumer.start()
        try:
            _wait(printer, stop, args.idle_timeout, consumer)
        finally:
            consumer.shutdown()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if printer.broken:   # the reader of stdout went away (`| head`): nothing more to print
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    print(f"consumed {printer.count} messages", file=sys.stderr)
    if consumer.failure is not None:   # refused for good (no permission, filter not supported): exit 2
        raise consumer.failure
    return 0


def _wait(printer: Printer, stop: threading.Event, idle_timeout: float | None,
          consumer: PushConsumer) -> None:
    while not printer.done.wait(WAIT_STEP_S) and not stop.is_set() and consumer.failure is None:
        if idle_timeout is not None and time.monotonic() - printer.last_activity >= idle_timeout:
            return
