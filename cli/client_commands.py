"""`rmq topic|produce|consume|group`: the client commands of the CLI (docs/manual/cli.md).

Each command talks to the brokers / name servers named by `--endpoints` through
`rmq.connector.client.RmqClient`; client errors become one `rmq: error: ...` line (UserError),
translated in one place (`_run`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any

from rmq import message_format as mf
from rmq import retry
from rmq.cli import admin_commands, client_security, consume_command
from rmq.cli.output import (
    incomplete_exit,
    incomplete_note,
    print_json,
    print_table,
    timestamp,
    unreachable_json,
    uptime,
    warn_unreachable,
)
from rmq.cli.parser import Subcommands
from rmq.command_line import UserError, non_negative_int, positive_float, positive_int
from rmq.connector.admin import MQAdmin
from rmq.connector.client import BrokerMember, OutgoingMessage, QueueOffsets, RmqClient
from rmq.connector.errors import RmqError, RmqUnavailable
from rmq.connector.message import Message, MessageExt, decode_messages
from rmq.connector.producer import Producer, retriable, select_message_queue_by_hash, writable_queues
from rmq.message_queue import MessageQueue
from rmq.statuses import PullStatus, SendStatus
from rmq.topic_config import PERM_READ, PERM_WRITE
from rmq.v1 import rmq_pb2

ENDPOINTS_ENV = "RMQ_ENDPOINTS"
DEFAULT_ENDPOINTS = "127.0.0.1:10911"          # the default broker (embedded route service)
DEFAULT_GROUP = "rmq-cli"
PULL_BATCH_SIZE = 32                           # RocketMQ pullBatchSize
SUSPEND_TIMEOUT_MS = 15_000                    # RocketMQ brokerSuspendMaxTimeMillis
COMMIT_INTERVAL_SECONDS = 5.0                  # RocketMQ persistConsumerOffsetInterval
PROGRESS_INTERVAL_SECONDS = 1.0
LINGER_MS = 50                                 # rmq produce: a batch waits this long for more lines
RETRY_TIMEOUT_S = 30.0                         # ... and retries a failed send this long
RETRY_BACKOFF_S = (0.2, 2.0)                   # first and longest pause between retries
PERMS = (PERM_READ | PERM_WRITE, PERM_READ, PERM_WRITE)   # --perm of topic create / update
PERMS_HELP = "6 read-write, 4 read, 2 write"

Command = Callable[[RmqClient, argparse.Namespace], int]


def add_parsers(commands: Subcommands) -> None:
    _add_topic_parsers(commands)

    cluster = commands.add_parser("cluster", help="broker groups: each member's role, CommitLog offsets and "
                                                   "replication lag")
    cluster.add_argument("--json", action="store_true", help="machine-readable output")
    _client_command(cluster, _cluster_status)

    produce = commands.add_parser("produce", help="send messages: lines from stdin, or --count generated")
    produce.add_argument("topic")
    produce.add_argument("--count", type=positive_int, help="send N generated messages, not stdin lines")
    produce.add_argument("--size", type=positive_int, help="body size in bytes of generated messages (100)")
    produce.add_argument("--tags", default="", help="tag of every message")
    produce.add_argument("--keys", default="", help="keys of every message (space-separated)")
    produce.add_argument("--property", action="append", default=[], type=_user_property, metavar="KEY=VALUE",
                         help="a user property of every message (repeatable)")
    when = produce.add_mutually_exclusive_group()
    when.add_argument("--deliver-at", type=deliver_at_ms, metavar="ISO8601|MS",
                      help="timer message: deliver at this time (2026-12-01T09:00:00Z, or epoch ms); "
                           "prints each message's recall handle")
    when.add_argument("--delay", type=delay_ms, metavar="DURATION",
                      help="timer message: deliver this long after the broker receives it (500ms, 30s, 5m, "
                           "2h, 1d); prints each message's recall handle")
    produce.add_argument("--batch-size", type=positive_int, default=256, help="messages per send (256)")
    produce.add_argument("--linger-ms", type=non_negative_int, default=LINGER_MS, metavar="MS",
                         help=f"send what stdin gave once it has waited this long for more ({LINGER_MS}): "
                              "`tail -f app.log | rmq produce logs` sends each line within it")
    produce.add_argument("--retry-timeout", type=positive_float, default=RETRY_TIMEOUT_S, metavar="SECONDS",
                         help="keep retrying a failed send this long, on another broker or the group's new "
                              f"master after a failover ({RETRY_TIMEOUT_S:g}); then exit 1 saying what was "
                              "acknowledged")
    produce.add_argument("--key-hash", action="store_true",
                         help="stdin lines are KEY<TAB>BODY: the key is the message's key and picks its "
                              "queue (same key, same queue: SelectMessageQueueByHash)")
    _client_command(produce, _produce)

    _client_command(consume_command.add_parser(commands), consume_command.consume)

    group = commands.add_parser("group", help="consumer group commands")
    group_commands = group.add_subparsers(dest="group_command", required=True)
    progress = group_commands.add_parser("progress", help="per queue: broker offset, consumer offset, lag")
    progress.add_argument("group")
    progress.add_argument("--topic", default="", help="only this topic (also its queues without offsets)")
    progress.add_argument("--json", action="store_true", help="machine-readable output")
    _client_command(progress, _group_progress)
    for parser, command in admin_commands.group_parsers(group_commands):
        _client_command(parser, command)
    for parser, command in admin_commands.message_parsers(commands):
        _client_command(parser, command)
    listing = group_commands.add_parser("list", help="consumer groups: live members and total lag")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    _client_command(listing, _group_list)

    dlq = commands.add_parser("dlq", help="dead-letter queue of a consumer group (%%DLQ%%<group>)")
    dlq_commands = dlq.add_subparsers(dest="dlq_command", required=True)
    listing = dlq_commands.add_parser("list", help="the group's dead letters (resent ones marked)")
    listing.add_argument("group")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    _client_command(listing, _dlq_list)
    resend = dlq_commands.add_parser("resend", help="re-publish dead letters to their original topic (every "
                                                    "group subscribed to it gets them again)")
    resend.add_argument("group")
    resend.add_argument("--msg-id", default="",
                        help="only this message (its id or original id), even if resent before")
    resend.add_argument("--group-only", action="store_true",
                        help="to this group only: through its retry topic %%RETRY%%<group>, which only its "
                             "consumers read (as RocketMQ's consumeMessageDirectly reaches one group)")
    _client_command(resend, _dlq_resend)


def _add_topic_parsers(commands: Subcommands) -> None:
    topic = commands.add_parser("topic", help="topic administration")
    topic_commands = topic.add_subparsers(dest="topic_command", required=True)

    create = topic_commands.add_parser("create", help="create a topic on every broker")
    create.add_argument("name")
    create.add_argument("--queues", type=positive_int, required=True, help="queues per broker")
    create.add_argument("--perm", type=int, choices=PERMS, default=PERM_READ | PERM_WRITE,
                        help=f"{PERMS_HELP} (default 6)")
    create.add_argument("--if-not-exists", action="store_true",
                        help="an existing topic is left as it is (exit 0)")
    _client_command(create, _topic_create)

    update = topic_commands.add_parser("update", help="grow a topic's queues on every broker holding it")
    update.add_argument("name")
    update.add_argument("--queues", type=positive_int, required=True,
                        help="queues per broker (at least the current count: topics never shrink)")
    update.add_argument("--perm", type=int, choices=PERMS, help=f"{PERMS_HELP} (default: unchanged)")
    _client_command(update, _topic_update)

    listing = topic_commands.add_parser("list", help="list topics")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    _client_command(listing, _topic_list)

    describe = topic_commands.add_parser("describe", help="per queue: min/max offset, last store time")
    describe.add_argument("name")
    describe.add_argument("--json", action="store_true", help="machine-readable output")
    _client_command(describe, _topic_describe)

    delete = topic_commands.add_parser("delete", help="delete a topic on every broker holding it")
    delete.add_argument("name")
    _client_command(delete, _topic_delete)


def _client_command(parser: argparse.ArgumentParser, command: Command) -> None:
    parser.add_argument("--endpoints", default=os.environ.get(ENDPOINTS_ENV, DEFAULT_ENDPOINTS),
                        metavar="HOST:PORT[,...]",
                        help=f"name server(s) or broker(s) (${ENDPOINTS_ENV}, else {DEFAULT_ENDPOINTS})")
    client_security.add_arguments(parser)
    parser.set_defaults(handler=functools.partial(_run, command))


def _run(command: Command, args: argparse.Namespace) -> int:
    """Run a client command; every client error becomes one UserError line."""
    security = client_security.client_security(args)
    try:
        client = RmqClient(args.endpoints, **security.client_kwargs())
    except ValueError as error:
        raise UserError(str(error)) from None
    try:
        with client:
            return command(client, args)
    except RmqError as error:
        raise UserError(_describe(error)) from None


def _describe(error: RmqError) -> str:
    if isinstance(error, RmqUnavailable):
        text = f"cannot reach {error.broker}: {error.message}"
    else:
        text = str(error)
    return " ".join(text.split())  # one line, whatever the server sent


# ---------------------------------------------------------------- topic


def _topic_create(client: RmqClient, args: argparse.Namespace) -> int:
    if args.if_not_exists and _topic_offsets_if_exists(client, args.name, required=False):
        route = client.query_route(args.name)
        print(f"topic {args.name} exists with {len(route.message_queues)} queues on "
              f"{', '.join(route.brokers)}")
        return 0
    brokers = client.create_topic(args.name, queues=args.queues, perm=args.perm)
    print(f"created topic {args.name} with {args.queues} queues on {', '.join(brokers)}")
    return 0


def _topic_update(client: RmqClient, args: argparse.Namespace) -> int:
    brokers = client.update_topic(args.name, queues=args.queues, perm=args.perm)
    print(f"updated topic {args.name} to {args.queues} queues on {', '.join(brokers)}")
    return 0


def _topic_list(client: RmqClient, args: argparse.Namespace) -> int:
    topics = client.list_topics()
    if args.json:
        print_json({"topics": [{"topic": t.topic_name, "read_queue_nums": t.read_queue_nums,
                                 "write_queue_nums": t.write_queue_nums, "perm": t.perm} for t in topics]})
    else:
        print_table(["TOPIC", "READ_QUEUES", "WRITE_QUEUES", "PERM"],
                     [[t.topic_name, t.read_queue_nums, t.write_queue_nums, _perm(t.perm)] for t in topics])
    return 0


def _topic_describe(client: RmqClient, args: argparse.Namespace) -> int:
    route = client.query_route(args.name)
    unreachable: dict[str, RmqUnavailable] = {}
    offsets = client.topic_offsets(args.name, unreachable)
    _check_some_reachable(unreachable, route.brokers)
    brokers: list[dict[str, Any]]
    queues: list[dict[str, Any]]
    brokers = [{"broker_name": q.broker_name, "address": route.brokers.get(q.broker_name, ""),
                "read_queue_nums": q.read_queue_nums, "write_queue_nums": q.write_queue_nums, "perm": q.perm}
               for q in route.queue_datas]
    queues = [{"broker_name": mq.broker_name, "queue_id": mq.queue_id, "min_offset": o.min_offset,
               "max_offset": o.max_offset, "last_store_timestamp": o.last_store_timestamp}
              for mq, o in offsets.items()]
    for b in brokers:
        b["members"] = _member_states(client, b["broker_name"], route.members.get(b["broker_name"], ()))
    if args.json:
        print_json({"topic": args.name, "brokers": brokers, "queues": queues,
                     "unreachable": unreachable_json(unreachable)})
        return 0
    warn_unreachable(unreachable)
    for b in brokers:
        print(f"topic {args.name} on {b['broker_name']} ({b['address']}): {b['read_queue_nums']} read / "
              f"{b['write_queue_nums']} write queues, perm {_perm(b['perm'])}")
        _print_members(b["members"])
    print_table(["BROKER", "QUEUE", "MIN_OFFSET", "MAX_OFFSET", "LAST_STORE_TIME"],
                 [[q["broker_name"], q["queue_id"], q["min_offset"], q["max_offset"],
                   timestamp(q["last_store_timestamp"])] for q in queues])
    return 0


def _topic_delete(client: RmqClient, args: argparse.Namespace) -> int:
    client.delete_topic(args.name)
    print(f"deleted topic {args.name}")
    return 0


# ---------------------------------------------------------------- produce


def _produce(client: RmqClient, args: argparse.Namespace) -> int:
    """Exit 0 only when every message was acknowledged; else one error line and exit 1. A failed
    send is retried (RocketMQ's retryTimesWhenSendFailed on another broker, then again after a
    pause, the route refreshed: a failover's new master) for --retry-timeout seconds."""
    if args.size is not None and args.count is None:
        raise UserError("--size needs --count (generated messages)")
    # an unknown topic or unreachable broker fails before reading input
    queues = writable_queues(client.query_route(args.topic))
    if args.key_hash and args.count is not None:
        raise UserError("--key-hash reads KEY<TAB>BODY lines from stdin: it does not go with --count")
    if args.count is not None:
        batches = _batched(_generated(args.count, args.size or 100), args.batch_size)
    else:
        batches = _lingering_batches(_stdin_lines(), args.batch_size, args.linger_ms / 1000)
    sent = acknowledged = master_only = 0
    progress = _Progress(args.count)
    producer = Producer(args.endpoints, client=client)
    try:
        for batch in batches:
            sent += len(batch)
            for broker_name, messages in _outgoing(batch, args, queues):
                stored = _send_retrying(producer, args, broker_name, messages)
                for handle in filter(None, (recall_handle for _, recall_handle in stored)):
                    print(f"recall-handle {handle}")
                acknowledged += len(messages)
                master_only += sum(status is not SendStatus.SEND_OK for status, _ in stored)
            progress.update(acknowledged)
    except RmqError as error:
        acknowledged += error.acknowledged
        print(f"rmq: error: {_describe(error)}; {acknowledged} of {sent} messages acknowledged",
              file=sys.stderr)
        return 1
    note = f", {master_only} stored on the master only: no slave confirmed them" if master_only else ""
    print(f"sent {sent} messages (acknowledged {acknowledged}{note})")
    return 0


def _send_retrying(producer: Producer, args: argparse.Namespace, broker_name: str | None,
                   messages: list[OutgoingMessage]) -> list[tuple[SendStatus, str]]:
    """Send one batch: through the Producer's retries on the topic's other brokers (any broker), or
    to the broker the keys chose; after a failure nothing of which was stored, again after a pause
    with the route refreshed, until --retry-timeout. The stored messages' statuses and recall
    handles (a timer message's, else "")."""
    deadline = time.monotonic() + args.retry_timeout
    pause = RETRY_BACKOFF_S[0]
    while True:
        try:
            if broker_name is None:
                return [(result.status, result.recall_handle) for result in producer.send(
                    [Message(args.topic, m.body, tags=m.tags, keys=m.keys, properties=dict(m.properties))
                     for m in messages])]
            sent = producer.client.send(args.topic, messages, broker_name)
            return [(sent.status, handle) for handle in sent.recall_handles or [""] * len(messages)]
        except RmqError as error:
            if error.acknowledged or not retriable(error) or time.monotonic() + pause > deadline:
                raise
            left = deadline - time.monotonic()
            print(f"rmq: send failed, retrying for up to {left:.0f} s: {_describe(error)}", file=sys.stderr,
                  flush=True)
        time.sleep(pause)           # a failover takes seconds: the pause is the retry's backoff
        pause = min(pause * 2, RETRY_BACKOFF_S[1])
        with contextlib.suppress(RmqError):
            producer.client.query_route(args.topic)      # the new master's address, once registered


def _outgoing(batch: list[bytes], args: argparse.Namespace, queues: list[MessageQueue]
              ) -> Iterator[tuple[str | None, list[OutgoingMessage]]]:
    """The batch as sends: one (any broker) without --key-hash; else one per broker, each line's
    key choosing its queue."""
    properties = dict(args.property)
    if args.deliver_at is not None:
        properties[mf.PROPERTY_TIMER_DELIVER_MS] = str(args.deliver_at)
    if args.delay is not None:
        properties[mf.PROPERTY_TIMER_DELAY_MS] = str(args.delay)
    if not args.key_hash:
        yield None, [OutgoingMessage(body, tags=args.tags, keys=args.keys, properties=properties)
                     for body in batch]
        return
    by_broker: dict[str, list[OutgoingMessage]] = {}
    for line in batch:
        key, tab, body = line.partition(b"\t")
        if not tab or not key or not body:
            raise UserError(f"--key-hash: expected KEY<TAB>BODY, got {line[:60]!r}")
        text = key.decode("utf-8", errors="replace")
        mq = select_message_queue_by_hash(queues, Message(args.topic, body, keys=text), None)   # by key
        by_broker.setdefault(mq.broker_name, []).append(
            OutgoingMessage(body, tags=args.tags, keys=text, properties=properties, queue_id=mq.queue_id))
    yield from by_broker.items()


DURATION_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def delay_ms(text: str) -> int:
    """--delay: a whole number with a unit (ms, s, m, h, d) -> milliseconds."""
    number = text.rstrip("smhd")
    unit = text[len(number):]
    if not number.isdigit() or unit not in DURATION_UNITS_MS:
        raise argparse.ArgumentTypeError(
            f"expected a duration such as 500ms, 30s, 5m, 2h or 1d, not {text!r}")
    return int(number) * DURATION_UNITS_MS[unit]


def deliver_at_ms(text: str) -> int:
    """--deliver-at: epoch milliseconds, or an ISO 8601 time with its zone (Z or +HH:MM)."""
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise argparse.ArgumentTypeError(
            f"expected epoch ms or an ISO 8601 time with its zone (2026-12-01T09:00:00Z), not {text!r}")
    return int(moment.timestamp() * 1000)


def _user_property(text: str) -> tuple[str, str]:
    """KEY=VALUE of --property: a non-empty key that is not one the broker or SDK sets itself."""
    key, equals, value = text.partition("=")
    if not equals or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, not {text!r}")
    if key in mf.SYSTEM_PROPERTIES:
        raise argparse.ArgumentTypeError(f"{key} is set by rmq itself (use --tags / --keys for those)")
    return key, value


def _generated(count: int, size: int) -> Iterator[bytes]:
    for i in range(count):
        yield (b"%d " % i).ljust(size, b"x")[:size]


def _stdin_lines() -> Iterator[bytes]:
    """stdin lines without their line ending; empty lines are skipped (an empty body is illegal)."""
    for line in sys.stdin.buffer:
        body = line.rstrip(b"\r\n")
        if body:
            yield body


def _batched(items: Iterable[bytes], size: int) -> Iterator[list[bytes]]:
    batch: list[bytes] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _lingering_batches(items: Iterator[bytes], size: int, linger_s: float) -> Iterator[list[bytes]]:
    """Batches of at most `size` items, each sent once full or once `linger_s` passed since its
    first item arrived (a slow source such as `tail -f` is not held until `size` lines came).
    The items are read on a daemon thread; a bounded queue keeps it at most a few batches ahead."""
    arrived: queue.Queue[bytes | None] = queue.Queue(maxsize=4 * size)

    def read() -> None:
        for item in items:
            arrived.put(item)
        arrived.put(None)

    threading.Thread(target=read, name="rmq-produce-stdin", daemon=True).start()
    ended = False
    while not ended:
        first = arrived.get()
        if first is None:
            return
        batch, until = [first], time.monotonic() + linger_s
        while len(batch) < size:
            try:
                item = arrived.get(timeout=max(until - time.monotonic(), 0))
            except queue.Empty:
                break
            if item is None:
                ended = True
                break
            batch.append(item)
        yield batch


class _Progress:
    """A progress line on stderr about once a second (only long runs ever print one)."""

    def __init__(self, total: int | None) -> None:
        self.total = total
        self.last = time.monotonic()

    def update(self, acknowledged: int) -> None:
        now = time.monotonic()
        if now - self.last >= PROGRESS_INTERVAL_SECONDS:
            self.last = now
            of_total = f" of {self.total}" if self.total else ""
            print(f"... {acknowledged}{of_total} messages acknowledged", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- group


def _group_rows(client: RmqClient, group: str, topic: str,
                unreachable: dict[str, RmqUnavailable] | None = None) -> list[dict[str, Any]]:
    """Per queue of the group's topics (or of `topic`): offsets and lag; [] for a group that
    never committed (without `topic`). With `unreachable`, brokers that cannot be reached are
    collected there and their queues left out."""
    committed = client.query_consumer_offsets(group, topic, unreachable)
    retry_topic = retry.retry_topic(group)
    if topic:   # the group's retry topic too: its lag is the retries still waiting
        committed.update(client.query_consumer_offsets(group, retry_topic, unreachable)
                         if _topic_offsets_if_exists(client, retry_topic, False, unreachable) else {})
    if not committed and not topic:
        return []
    # the retry topic even before the group committed on it (its lag is the retries waiting)
    topics = sorted({mq.topic for mq in committed} | {retry_topic} | ({topic} if topic else set()))
    rows: list[dict[str, Any]] = []
    for name in topics:
        for mq, bounds in _topic_offsets_if_exists(client, name, name == topic, unreachable).items():
            consumer = committed.get(mq)
            # A queue without a committed offset lags by everything it still holds.
            lag = max(bounds.max_offset - (bounds.min_offset if consumer is None else consumer), 0)
            rows.append({"topic": mq.topic, "broker_name": mq.broker_name, "queue_id": mq.queue_id,
                         "min_offset": bounds.min_offset, "max_offset": bounds.max_offset,
                         "consumer_offset": consumer, "lag": lag})
    return rows


def _group_progress(client: RmqClient, args: argparse.Namespace) -> int:
    """Per queue: broker max offset, consumer offset, lag (mqadmin consumerProgress). Exit 1 when
    a broker could not be reached: its queues are missing and the total lag is a lower bound."""
    unreachable: dict[str, RmqUnavailable] = {}
    rows = _group_rows(client, args.group, args.topic, unreachable)
    if not rows and unreachable:
        raise next(iter(unreachable.values()))
    if not rows and not args.topic:
        raise UserError(f"consumer group {args.group} has no committed offsets")
    total = sum(row["lag"] for row in rows)
    groups = client.list_broker_groups()
    members = {name: _member_states(client, name, groups.get(name, ()))
               for name in sorted({row["broker_name"] for row in rows})}
    if args.json:
        print_json({"group": args.group, "queues": rows, "total_lag": total, "brokers": members,
                     "unreachable": unreachable_json(unreachable), "complete": not unreachable})
        return incomplete_exit(unreachable)
    warn_unreachable(unreachable)
    for name, states in members.items():
        print(f"broker {name}:")
        _print_members(states)
    print_table(["TOPIC", "BROKER", "QUEUE", "BROKER_OFFSET", "CONSUMER_OFFSET", "LAG"],
                 [[r["topic"], r["broker_name"], r["queue_id"], r["max_offset"],
                   "-" if r["consumer_offset"] is None else r["consumer_offset"], r["lag"]] for r in rows])
    print(f"total lag: {total}{incomplete_note(unreachable)}")
    return incomplete_exit(unreachable)


def _group_list(client: RmqClient, args: argparse.Namespace) -> int:
    """Every consumer group a broker knows from any source (live members of every protocol, RocketMQ
    5 clients included; committed offsets; retry and dead-letter topics), with its live members and
    total lag. Exit 1 when a broker could not be reached (the lags leave its queues out)."""
    unreachable: dict[str, RmqUnavailable] = {}
    listed = []
    for group in client.list_consumer_groups(unreachable):
        rows = _group_rows(client, group, "", unreachable)
        answered = client.consumer_connections(group, unreachable)
        members = sorted({c.client_id for found in answered.values() for c in found}) if answered else None
        topics = sorted({r["topic"] for r in rows if not retry.is_retry_topic(r["topic"])})
        listed.append({"group": group, "members": members, "topics": topics,
                       "total_lag": sum(r["lag"] for r in rows)})
    if args.json:
        print_json({"groups": listed, "unreachable": unreachable_json(unreachable),
                     "complete": not unreachable})
        return incomplete_exit(unreachable)
    warn_unreachable(unreachable)
    print_table(["GROUP", "MEMBERS", "TOPICS", "TOTAL_LAG"],
                 [[g["group"], "?" if g["members"] is None else len(g["members"]),
                   ",".join(g["topics"]) or "-", g["total_lag"]] for g in listed])
    return incomplete_exit(unreachable)






# ---------------------------------------------------------------- broker groups


def _cluster_status(client: RmqClient, args: argparse.Namespace) -> int:
    """Every broker group's members (mqadmin clusterList with the HA columns). Exit 1 when a
    member's status could not be read: a script must not read the cluster as healthy."""
    groups = {name: _member_states(client, name, members)
              for name, members in client.list_broker_groups().items()}
    failing = [f"{name} id {m['broker_id']} ({m['address']})"
               for name, states in groups.items() for m in states if "registered_role" in m]
    controller = _controller_view(client)
    if args.json:
        print_json({"brokers": groups, "complete": not failing,
                    **({"controller": controller} if controller else {})})
        return 1 if failing else 0
    print_table(["BROKER", "ID", "ROLE", "EPOCH", "ADDRESS", "MIN_OFFSET", "MAX_OFFSET", "SLAVE_LAG_BYTES",
                 "VERSION", "UP", "PUT_TODAY", "GET_TODAY", "STATE"],
                [[name, m["broker_id"], m["role"], _dash(m.get("epoch")), m["address"],
                  _dash(m["min_offset"]), _dash(m["max_offset"]), _dash(m["lag_bytes"]),
                  m.get("version") or "-", uptime(m.get("boot_timestamp") or 0),
                  _dash(m.get("put_today")), _dash(m.get("get_today")), m["state"]]
                  for name, states in groups.items() for m in states])
    if controller:
        print(f"\nleading controller: {controller['leader']}")
        print_table(["BROKER", "EPOCH", "MASTER_ID", "SYNC_STATE_SET"],
                    [[g["broker_name"], g["epoch"], g["master_id"], ",".join(map(str, g["in_sync_ids"]))]
                     for g in controller["groups"]])
    if failing:
        print(f"rmq: no status from {', '.join(failing)}", file=sys.stderr)
    return 1 if failing else 0


def _controller_view(client: RmqClient) -> dict[str, Any] | None:
    """The leading controller and its epoch and SyncStateSet per group (controller mode)."""
    state = MQAdmin(client).controller()
    return None if state is None else dataclasses.asdict(state)


def _member_states(client: RmqClient, name: str, members: Iterable[BrokerMember]) -> list[dict[str, Any]]:
    """Each member's role, CommitLog offsets and, for a slave, how many bytes it is behind its
    master (the master's max offset now, or as the slave last heard it when the master is down);
    in controller mode its epoch and, for the master, the in-sync set (docs/controller.md)."""
    states: list[dict[str, Any]] = []
    master_max: int | None = None
    for member in sorted(members, key=lambda m: (m.role == rmq_pb2.SLAVE, m.broker_id)):
        state: dict[str, Any] = {"broker_id": member.broker_id, "address": member.address,
                                 "flight_address": member.flight_address or None,   # docs/data-plane.md
                                 "role": rmq_pb2.BrokerRole.Name(member.role), "min_offset": None,
                                 "max_offset": None, "lag_bytes": None, "state": "ok"}
        states.append(state)
        try:
            status = client.broker_status(member.address)
        except RmqError as error:
            # the name server's role is what it last registered: after a failover a dead old master
            # is still "SYNC_MASTER" there, so an unanswering member's role is not shown as its own
            state.update(role="?", registered_role=state["role"],
                         state=f"unreachable (registered as {state['role']})"
                         if isinstance(error, RmqUnavailable) else _describe(error))
            continue
        state.update(min_offset=status.commit_log_min_offset, max_offset=status.commit_log_max_offset,
                     role=rmq_pb2.BrokerRole.Name(status.role), version=status.version or None,
                     boot_timestamp=status.boot_timestamp or None, put_today=status.put_today,
                     get_today=status.get_today)
        if status.epoch:
            state.update(epoch=status.epoch, in_sync_ids=list(status.in_sync_ids))
        if status.role != rmq_pb2.SLAVE:
            master_max = status.commit_log_max_offset
            continue
        reference = master_max if master_max is not None else status.master_max_offset
        state["lag_bytes"] = max(reference - status.commit_log_max_offset, 0)
        if status.replication_error:
            state["state"] = f"refused by the master: {status.replication_error}"
    return sorted(states, key=lambda state: state["broker_id"])


def _print_members(states: list[dict[str, Any]]) -> None:
    for m in states:
        lag = f", {m['lag_bytes']} bytes behind the master" if m["lag_bytes"] is not None else ""
        offsets = f", CommitLog max offset {m['max_offset']}" if m["max_offset"] is not None else ""
        epoch = f", epoch {m['epoch']}" if "epoch" in m else ""
        in_sync = (f", in sync: ids {', '.join(map(str, m['in_sync_ids']))}"
                   if "epoch" in m and m["role"] != "SLAVE" else "")
        print(f"  id {m['broker_id']} {m['role']} {m['address']}{epoch}{offsets}{lag}{in_sync} "
              f"({m['state']})")


def _dash(value: int | None) -> object:
    return "-" if value is None else value


def _dead_letters(client: RmqClient, group: str) -> Iterator[tuple[MessageExt, bool]]:
    """Every message of the group's DLQ, oldest first, and whether `dlq resend` already
    re-published it (the group's offset on the DLQ marks how far resending got)."""
    topic = retry.dlq_topic(group)
    queues = _topic_offsets_if_exists(client, topic, required=False)
    resent = client.query_consumer_offsets(group, topic) if queues else {}
    for mq, bounds in queues.items():
        offset = bounds.min_offset
        while offset < bounds.max_offset:
            result = client.browse_messages(mq, offset, PULL_BATCH_SIZE)
            if result.pull_status != PullStatus.FOUND:
                break
            for message in decode_messages(result.messages, mq):
                yield message, message.queue_offset < resent.get(mq, 0)
            offset = result.next_begin_offset


def _dlq_list(client: RmqClient, args: argparse.Namespace) -> int:
    letters = list(_dead_letters(client, args.group))
    if args.json:
        print_json([{"msg_id": m.msg_id, "origin_msg_id": m.origin_msg_id, "topic": m.topic,
                      "queue_offset": m.queue_offset, "reconsume_times": m.reconsume_times, "tags": m.tags,
                      "keys": m.keys, "properties": m.properties, "body": m.body.decode("utf-8", "replace"),
                      "store_timestamp": m.store_timestamp, "resent": resent} for m, resent in letters])
        return 0
    print_table(["MSG_ID", "ORIGIN_MSG_ID", "TOPIC", "RECONSUME_TIMES", "TAGS", "KEYS", "STORED", "RESENT",
                  "BODY"],
                 [[m.msg_id, m.origin_msg_id, m.topic, m.reconsume_times, m.tags or "-", m.keys or "-",
                   timestamp(m.store_timestamp), "yes" if resent else "no",
                   consume_command.one_line(m.body)[:40]]
                  for m, resent in letters])
    print(f"{len(letters)} dead letters in {retry.dlq_topic(args.group)}")
    return 0


# Broker bookkeeping a re-published message must not carry (it is a new message).
_NOT_REPUBLISHED = frozenset({mf.PROPERTY_TAGS, mf.PROPERTY_KEYS, mf.PROPERTY_REAL_TOPIC,
                              mf.PROPERTY_REAL_QUEUE_ID, mf.PROPERTY_DELAY_TIME_LEVEL, mf.PROPERTY_UNIQ_KEY})


def _dlq_resend(client: RmqClient, args: argparse.Namespace) -> int:
    """Re-publish dead letters to their original topic with body, tags, keys and properties
    (ORIGIN_MESSAGE_ID included, so listeners see the first copy's id as `origin_msg_id`), or
    with --group-only to the group's retry topic, which only the group's consumers read (they
    see the original topic); without --msg-id only those not resent before, and the DLQ offset
    moves past them."""
    resent_count = 0
    done: dict[MessageQueue, int] = {}
    for message, resent in _dead_letters(client, args.group):
        if args.msg_id and args.msg_id not in (message.msg_id, message.origin_msg_id):
            continue
        if resent and not args.msg_id:
            continue
        properties = {k: v for k, v in message.properties.items() if k not in _NOT_REPUBLISHED}
        topic = message.topic
        if args.group_only:
            topic, properties[retry.PROPERTY_RETRY_TOPIC] = retry.retry_topic(args.group), message.topic
        client.send(topic, [OutgoingMessage(message.body, message.tags, message.keys, properties)])
        resent_count += 1
        if not args.msg_id:
            done[message.message_queue] = message.queue_offset + 1
    if done:
        client.update_consumer_offsets(args.group, done, increase_only=True)
    if args.msg_id and not resent_count:
        raise UserError(f"no dead letter of group {args.group} has id {args.msg_id}")
    print(f"resent {resent_count} dead letters of group {args.group}"
          f"{' (to this group only)' if args.group_only else ''}")
    return 0


def _topic_offsets_if_exists(client: RmqClient, topic: str, required: bool,
                             unreachable: dict[str, RmqUnavailable] | None = None
                             ) -> dict[MessageQueue, QueueOffsets]:
    """The topic's queue offsets; a deleted topic the group still has offsets for is skipped."""
    try:
        return client.topic_offsets(topic, unreachable)
    except RmqError as error:
        if required or error.code != rmq_pb2.TOPIC_NOT_EXIST:
            raise
        return {}


def _check_some_reachable(unreachable: dict[str, RmqUnavailable], brokers: Iterable[str]) -> None:
    """Fail (with the first error) only when no broker holding the topic answered."""
    if unreachable and set(brokers) <= set(unreachable):
        raise next(iter(unreachable.values()))






# ---------------------------------------------------------------- output and argument types


def _perm(perm: int) -> str:
    return ("r" if perm & PERM_READ else "-") + ("w" if perm & PERM_WRITE else "-")


