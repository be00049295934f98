"""`rmq message query` and `rmq group members|reset-offset|status|settings|delete`: RocketMQ's mqadmin
queryMsgByKey / queryMsgById / consumerConnection / resetOffsetByTime / consumerStatus / updateSubGroup /
deleteSubGroup, on
rmq.connector.admin.MQAdmin. Results are bounded and paged."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from typing import Any

from rmq.cli.output import (
    incomplete_exit,
    print_json,
    print_table,
    timestamp,
    unreachable_json,
    warn_unreachable,
)
from rmq.cli.parser import Subcommands
from rmq.command_line import UserError, non_negative_int, positive_int
from rmq.connector.admin import PAGE_MAX, MQAdmin, ResetTarget
from rmq.connector.client import RmqClient
from rmq.connector.errors import RmqUnavailable
from rmq.connector.message import MessageExt
from rmq.v1 import rmq_pb2

Command = Callable[[RmqClient, argparse.Namespace], int]
BODY_PREVIEW = 60


def message_parsers(commands: Subcommands
                    ) -> Iterator[tuple[argparse.ArgumentParser, Command]]:
    message = commands.add_parser("message", help="look messages up, recall a timer message")
    message_commands = message.add_subparsers(dest="message_command", required=True)
    query = message_commands.add_parser(
        "query", help="messages of a topic by key, by message id or by store-time range")
    query.add_argument("topic")
    how = query.add_mutually_exclusive_group(required=True)
    how.add_argument("--key", help="a key the producer set (KEYS) or its unique id")
    how.add_argument("--msg-id", help="a message id as `rmq consume` and the SDK show it")
    how.add_argument("--begin", type=int, metavar="MS", help="store time from (epoch ms; with --end)")
    query.add_argument("--end", type=int, metavar="MS", help="store time until, exclusive (epoch ms)")
    query.add_argument("--limit", type=_page_size, default=100,
                       help=f"messages per page (at most {PAGE_MAX})")
    query.add_argument("--page", type=non_negative_int, default=0, help="page of a time-range query, from 0")
    query.add_argument("--group", action="append", default=[],
                       help="also show whether this consumer group consumed each message (repeatable)")
    query.add_argument("--json", action="store_true")
    yield query, _message_query
    recall = message_commands.add_parser(
        "recall", help="cancel a timer message before its time by the recall handle its send printed "
                       "(its producer's account or an admin)")
    recall.add_argument("handle", help="the recall handle (`rmq produce --deliver-at/--delay` prints it)")
    yield recall, _message_recall


def _message_recall(client: RmqClient, args: argparse.Namespace) -> int:
    client.recall_message(args.handle)
    print("recalled: the timer message will not be delivered")
    return 0


def group_parsers(group_commands: Subcommands
                  ) -> Iterator[tuple[argparse.ArgumentParser, Command]]:
    members = group_commands.add_parser("members", help="live members: client id, protocol, address, "
                                                        "owned queues")
    members.add_argument("group")
    members.add_argument("--json", action="store_true")
    yield members, _group_members
    reset = group_commands.add_parser(
        "reset-offset", help="move a group's offsets on a topic (its live rmq consumers adopt them); "
                             "--to latest skips what has accumulated")
    reset.add_argument("group")
    reset.add_argument("--topic", default="",
                       help="default: every topic the group has offsets on or its members subscribe to")
    reset.add_argument("--to", required=True, type=_reset_target, metavar="earliest|latest|timestamp:MS")
    reset.add_argument("--force", action="store_true",
                       help="even while the group has live members that cannot be told (RocketMQ 4.x/5 "
                            "clients, Spark queries): their next commits may overwrite the reset")
    reset.add_argument("--json", action="store_true")
    yield reset, _group_reset_offset
    producers = group_commands.add_parser(
        "producers", help="a producer group's live producers: client id, address, language, version "
                          "(RocketMQ producerConnection; RocketMQ 4.x producers)")
    producers.add_argument("group", help="the producer group")
    producers.add_argument("--json", action="store_true")
    yield producers, _group_producers
    status = group_commands.add_parser(
        "status", help="each live member's running info: process queues (cached messages, last pull and "
                       "consume, committed offset), subscriptions, consume type (RocketMQ consumerStatus)")
    status.add_argument("group")
    status.add_argument("--json", action="store_true")
    yield status, _group_status
    settings = group_commands.add_parser(
        "settings", help="show a group's settings on each broker, or change them (admin; RocketMQ "
                         "updateSubGroup)")
    settings.add_argument("group")
    settings.add_argument("--consume-enable", type=_yes_no, metavar="yes|no",
                          help="no: the group's pulls are refused (NO_PERMISSION) until set back to yes")
    settings.add_argument("--retry-max-times", type=non_negative_int, metavar="N",
                          help="deliveries retried before a message goes to the group's DLQ (default 16)")
    settings.add_argument("--json", action="store_true")
    yield settings, _group_settings
    delete = group_commands.add_parser("delete", help="forget a group: its offsets, retry and DLQ topics")
    delete.add_argument("group")
    delete.add_argument("--force", action="store_true", help="even while the group has live members")
    yield delete, _group_delete


def _reset_target(text: str) -> ResetTarget:
    try:
        return ResetTarget.parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _page_size(text: str) -> int:
    size = positive_int(text)
    if size > PAGE_MAX:
        raise argparse.ArgumentTypeError(f"at most {PAGE_MAX} messages per page (use --page for more), "
                                         f"not {size}")
    return size


def _message_query(client: RmqClient, args: argparse.Namespace) -> int:
    admin = MQAdmin(client)
    for group in args.group:
        _require_group(admin, group)
    if args.key:
        messages = admin.query_by_key(args.topic, args.key, limit=args.limit)
    elif args.msg_id:
        messages = [admin.view(args.msg_id)]
        if messages[0].topic != args.topic:
            raise UserError(f"message {args.msg_id} is in topic {messages[0].topic}, not {args.topic}")
    else:
        if args.end is None or args.end <= args.begin:
            raise UserError("--begin needs --end, later than --begin (epoch ms)")
        messages = admin.query_by_time(args.topic, args.begin, args.end, args.limit, args.page)
    rows = [_message_row(admin, message, args.group) for message in messages]
    if args.json:
        print_json({"topic": args.topic, "page": args.page, "messages": rows})
        return 0
    headers = ["MSG_ID", "TOPIC", "QUEUE", "OFFSET", "STORED", "TAGS", "KEYS", "BODY"]
    headers += [f"CONSUMED BY {group}" for group in args.group]
    print_table(headers,
                [[r["msg_id"], r["topic"], f"{r['broker_name']}/{r['queue_id']}", r["queue_offset"],
                  timestamp(r["store_timestamp"]), r["tags"] or "-", r["keys"] or "-", _preview(r["body"])]
                 + ["yes" if r["consumed"][g] else "no" for g in args.group] for r in rows])
    if not rows:
        print("no message found")
    return 0


def _message_row(admin: MQAdmin, message: MessageExt, groups: list[str]) -> dict[str, Any]:
    states = {state.group: state.consumed for state in admin.consume_states(message, groups)}
    return {"msg_id": message.msg_id, "topic": message.topic, "broker_name": message.broker_name,
            "queue_id": message.queue_id, "queue_offset": message.queue_offset,
            "store_timestamp": message.store_timestamp, "born_timestamp": message.born_timestamp,
            "tags": message.tags, "keys": message.keys, "properties": dict(message.properties),
            "reconsume_times": message.reconsume_times,
            "body": message.body.decode("utf-8", errors="replace"), "consumed": states}


def _preview(body: str) -> str:
    line = " ".join(body.split())
    return line if len(line) <= BODY_PREVIEW else line[:BODY_PREVIEW - 1] + "…"


def _require_group(admin: MQAdmin, group: str) -> None:
    """UserError unless some broker knows the group (members, offsets, retry or DLQ topic)."""
    unreachable: dict[str, RmqUnavailable] = {}
    if group not in admin.groups(unreachable):
        if unreachable:
            warn_unreachable(unreachable)
            raise UserError(f"consumer group {group} is not known to the brokers that answered; "
                            f"{', '.join(sorted(unreachable))} could not be asked")
        raise UserError(f"consumer group {group} does not exist")


def _group_members(client: RmqClient, args: argparse.Namespace) -> int:
    """Exit 1 when a broker could not be asked: its members are not listed."""
    unreachable: dict[str, RmqUnavailable] = {}
    members = MQAdmin(client).members(args.group, unreachable)
    if unreachable and len(unreachable) == len(client.list_brokers()):
        raise UserError(f"no broker could be asked for the members of {args.group}: "
                        f"{', '.join(f'{name} ({error})' for name, error in sorted(unreachable.items()))}")
    if args.json:
        print_json({"group": args.group, "complete": not unreachable,
                    "unreachable": unreachable_json(unreachable), "members": [
            {"client_id": m.client_id, "protocol": m.protocol.label, "address": m.address,
             "broadcasting": m.broadcasting, "subscriptions": m.subscriptions,
             "queues": [{"topic": q.topic, "broker_name": q.broker_name, "queue_id": q.queue_id}
                        for q in m.queues]} for m in members]})
        return incomplete_exit(unreachable)
    warn_unreachable(unreachable)
    print_table(["CLIENT_ID", "PROTOCOL", "ADDRESS", "SUBSCRIPTIONS", "QUEUES"],
                [[m.client_id, m.protocol.label, m.address or "-",
                  ",".join(f"{t}:{e}" for t, e in m.subscriptions.items()) or "-",
                  " ".join(f"{q.topic}/{q.broker_name}/{q.queue_id}" for q in m.queues) or "-"]
                 for m in members])
    if not members:
        print(f"consumer group {args.group} has no live member"
              + (" on the brokers that answered" if unreachable else ""))
    return incomplete_exit(unreachable)


def _group_reset_offset(client: RmqClient, args: argparse.Namespace) -> int:
    admin = MQAdmin(client)
    _require_group(admin, args.group)      # a reset must not create a group that never existed
    report = admin.reset_offsets(args.group, args.topic, args.to, args.force)
    if args.json:
        print_json({"group": args.group, "topic": args.topic, "queues": [
            {"topic": r.queue.topic, "broker_name": r.queue.broker_name, "queue_id": r.queue.queue_id,
             "offset": r.offset, "note": r.note} for r in report.results],
            "notified_clients": report.notified, "untold_clients": report.untold})
        return 0
    print_table(["TOPIC", "BROKER", "QUEUE", "OFFSET", "NOTE"],
                [[r.queue.topic, r.queue.broker_name, r.queue.queue_id, r.offset, r.note or "-"]
                 for r in report.results])
    print(f"live consumers told: {', '.join(report.notified) or 'none'}"
          + (f"; not told (may commit over the reset): {', '.join(report.untold)}" if report.untold else ""))
    return 0


def _group_producers(client: RmqClient, args: argparse.Namespace) -> int:
    """Exit 1 when a broker could not be asked: its producers are not listed."""
    unreachable: dict[str, RmqUnavailable] = {}
    producers = MQAdmin(client).producers(args.group, unreachable)
    rows = [{"client_id": p.client_id, "protocol": p.protocol.label, "address": p.address,
             "language": p.language, "version": p.version} for p in producers]
    if args.json:
        print_json({"group": args.group, "complete": not unreachable,
                    "unreachable": unreachable_json(unreachable), "producers": rows})
        return incomplete_exit(unreachable)
    warn_unreachable(unreachable)
    if not rows:
        print(f"producer group {args.group} has no live producer")
    else:
        print_table(["CLIENT_ID", "PROTOCOL", "ADDRESS", "LANGUAGE", "VERSION"],
                    [list(row.values()) for row in rows])
    return incomplete_exit(unreachable)


def running_info_json(info: rmq_pb2.ConsumerRunningInfo) -> dict[str, Any]:
    return {"client_id": info.client_id, "consume_type": rmq_pb2.ConsumeType.Name(info.consume_type),
            "message_model": rmq_pb2.MessageModel.Name(info.message_model), "orderly": info.orderly,
            "sdk_version": info.sdk_version,
            "subscriptions": {s.topic: s.sub_expression for s in info.subscriptions},
            "queues": [{"topic": q.queue.topic, "broker_name": q.queue.broker_name,
                        "queue_id": q.queue.queue_id, "committed_offset": q.committed_offset,
                        "cached_messages": q.cached_messages, "cached_bytes": q.cached_bytes,
                        "cached_min_offset": q.cached_min_offset,
                        "cached_max_offset": q.cached_max_offset, "last_pull": timestamp(q.last_pull_ms),
                        "last_consume": timestamp(q.last_consume_ms), "locked": q.locked}
                       for q in info.queues]}


def _group_status(client: RmqClient, args: argparse.Namespace) -> int:
    """Exit 1 when a member's running info could not be had."""
    admin = MQAdmin(client)
    _require_group(admin, args.group)
    infos = admin.running_infos(args.group)
    failed = {cid: why for cid, why in infos.items() if isinstance(why, str)}
    answered = [running_info_json(info) for info in infos.values() if not isinstance(info, str)]
    if args.json:
        print_json({"group": args.group, "complete": not failed, "clients": answered,
                    "not_answered": failed})
        return 1 if failed else 0
    if not infos:
        print(f"consumer group {args.group} has no live member")
    for info in answered:
        print(f"{info['client_id']}: {info['consume_type']} {info['message_model']}"
              f"{' orderly' if info['orderly'] else ''}, sdk {info['sdk_version']}, subscriptions "
              + (", ".join(f"{t}:{e}" for t, e in info["subscriptions"].items()) or "-"))
        print_table(["TOPIC", "BROKER", "QUEUE", "COMMITTED", "CACHED", "CACHED_RANGE", "LAST_PULL",
                     "LAST_CONSUME"],
                    [[q["topic"], q["broker_name"], q["queue_id"], q["committed_offset"],
                      q["cached_messages"],
                      f"{q['cached_min_offset']}-{q['cached_max_offset']}" if q["cached_messages"] else "-",
                      q["last_pull"], q["last_consume"]] for q in info["queues"]])
    for client_id, why in failed.items():
        print(f"{client_id}: {why}", file=sys.stderr)
    return 1 if failed else 0


def _yes_no(text: str) -> bool:
    if text not in ("yes", "no"):
        raise argparse.ArgumentTypeError(f"{text!r} is not yes or no")
    return text == "yes"


def _group_settings(client: RmqClient, args: argparse.Namespace) -> int:
    """Exit 1 when a broker could not be asked (its settings are not shown)."""
    admin = MQAdmin(client)
    _require_group(admin, args.group)
    unreachable: dict[str, RmqUnavailable] = {}
    if args.consume_enable is None and args.retry_max_times is None:
        settings = admin.group_settings(args.group, unreachable)
    else:
        settings = admin.update_group_settings(args.group, args.consume_enable, args.retry_max_times)
    if args.json:
        print_json({"group": args.group, "complete": not unreachable,
                    "unreachable": unreachable_json(unreachable),
                    "brokers": {name: {"consume_enable": s.consume_enable,
                                       "retry_max_times": s.retry_max_times, "stored": s.stored}
                                for name, s in settings.items()}})
        return incomplete_exit(unreachable)
    warn_unreachable(unreachable)
    print_table(["BROKER", "CONSUME_ENABLE", "RETRY_MAX_TIMES", "STORED"],
                [[name, "yes" if s.consume_enable else "no", s.retry_max_times,
                  "yes" if s.stored else "no (defaults)"] for name, s in settings.items()])
    return incomplete_exit(unreachable)


def _group_delete(client: RmqClient, args: argparse.Namespace) -> int:
    admin = MQAdmin(client)
    _require_group(admin, args.group)
    topics = admin.delete_group(args.group, args.force)
    print(f"deleted consumer group {args.group}" + (f" (offsets on {', '.join(topics)})" if topics else ""))
    return 0
