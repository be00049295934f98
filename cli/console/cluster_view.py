"""What the console shows, as plain dicts the HTML pages and the JSON API share, read through the
signed-in account's client: what that account may not see is left out (a refused topic is not
listed) or answered 403/404."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Iterator
from typing import Any

from rmq import message_format as mf
from rmq import retry
from rmq.cli.console.history import Sample
from rmq.cli.output import timestamp, uptime
from rmq.connector.admin import PAGE_MAX, MQAdmin, ResetReport, ResetTarget, resend
from rmq.connector.client import OutgoingMessage, RmqClient, TopicRoute
from rmq.connector.errors import ConfigError, RmqError, RmqUnavailable
from rmq.connector.message import MessageExt
from rmq.topic_config import PERM_READ, PERM_WRITE
from rmq.v1 import rmq_pb2

TOPICS_PAGE = 50
MAX_GROUPS_FOR_STATE = 20     # groups whose consume state a message page shows
DLQ_PAGE = 100                # dead letters per page
MAX_GROUPS_CHECKED = 100      # groups a topic page asks whether they consume it
PERM_NAMES = {PERM_READ | PERM_WRITE: "read-write", PERM_READ: "read-only", PERM_WRITE: "write-only"}
VISIBILITY_TTL_S = 30.0       # how long a chart series' "this account may see it" is remembered


Series = dict[str, dict[str, list[tuple[float, float]]]]     # History.snapshot(): kind -> name -> points


class Reads:
    """The brokers a page could not reach: the page names them and marks its figures incomplete;
    when no broker of the cluster answered, nothing could be read and the page is a 503."""

    def __init__(self, client: RmqClient) -> None:
        self.client = client
        self.missing: dict[str, RmqUnavailable] = {}     # filled by RmqClient / MQAdmin reads
        self.unreachable: dict[str, str] = {}            # other reads' notes: name -> why

    def add(self, missing: dict[str, RmqUnavailable]) -> None:
        self.missing.update(missing)

    def describe(self) -> str:
        return ", ".join(f"{name} ({why})" for name, why in sorted(self._all().items()))

    def _all(self) -> dict[str, str]:
        return {name: str(error) for name, error in self.missing.items()} | self.unreachable

    def done(self, data: dict[str, Any], answered: bool | None = None) -> dict[str, Any]:
        """`data` with the unreachable brokers; RmqUnavailable when nothing was read (`answered`
        False, or by default: every broker of the cluster unreachable)."""
        unreachable = self._all()
        if unreachable:
            if answered is None:
                answered = bool(set(self.client.list_brokers()) - set(unreachable))
            if not answered:
                raise RmqUnavailable(f"no broker could be read: {self.describe()}")
        return data | {"unreachable": unreachable}


class NotFound(Exception):
    """An unknown topic, group or message in a URL: the page says which."""


class ClusterView:
    def __init__(self, client: RmqClient) -> None:
        self.client = client
        self.admin = MQAdmin(client)
        self._visible: dict[tuple[str, str], tuple[bool, float]] = {}   # (kind, name) -> (seen, until)
        self._visible_lock = threading.Lock()

    # ------------------------------------------------------------ cluster
    def cluster(self) -> dict[str, Any]:
        reads, brokers, answered = Reads(self.client), [], False
        for name, members in self.client.list_broker_groups().items():
            rows = []
            for member in members:
                row: dict[str, Any] = {"broker_id": member.broker_id, "address": member.address,
                                       "role": rmq_pb2.BrokerRole.Name(member.role)}
                try:
                    status = self.client.broker_status(member.address)
                    # the live role (and epoch in controller mode), not the one last registered
                    row |= {"role": rmq_pb2.BrokerRole.Name(status.role), "epoch": status.epoch or None,
                            "min_offset": status.commit_log_min_offset,
                            "max_offset": status.commit_log_max_offset,
                            "replication_lag": _replication_lag(status), "error": status.replication_error,
                            "version": status.version, "boot_timestamp": status.boot_timestamp,
                            "uptime": uptime(status.boot_timestamp), "put_today": status.put_today,
                            "get_today": status.get_today}
                    answered = True
                except RmqUnavailable as error:
                    # e.g. a dead old master, still registered as master until the name servers expire it
                    reads.unreachable[f"{name} {member.address}"] = str(error)
                    row |= {"role": f"down (registered as {row['role']})", "error": str(error)}
                except RmqError as error:
                    row |= {"error": str(error)}
                rows.append(row)
            brokers.append({"name": name, "members": rows})
        controller = self.admin.controller()
        return reads.done({"brokers": brokers, "controller": controller and dataclasses.asdict(controller)},
                          answered or not brokers)

    # ------------------------------------------------------------ topics
    def topics(self, page: int = 0) -> dict[str, Any]:
        reads = Reads(self.client)
        configs = sorted(self.client.list_topics(), key=lambda t: t.topic_name)
        visible = []
        for config in configs[page * TOPICS_PAGE:(page + 1) * TOPICS_PAGE]:
            missing: dict[str, RmqUnavailable] = {}
            try:
                offsets = self.client.topic_offsets(config.topic_name, missing)
            except RmqError:      # not this account's to see (or deleted meanwhile)
                continue
            reads.add(missing)
            visible.append({"topic": config.topic_name, "queues": len(offsets),
                            "messages": sum(o.max_offset - o.min_offset for o in offsets.values()),
                            "timers": self.client.pending_timers(config.topic_name, missing),
                            "system": retry.is_group_copy_topic(config.topic_name),
                            "incomplete": bool(missing)})
        return reads.done({"topics": visible, "page": page, "more": len(configs) > (page + 1) * TOPICS_PAGE})

    def topic(self, topic: str) -> dict[str, Any]:
        reads = Reads(self.client)
        route = self._route(topic)
        offsets = self.client.topic_offsets(topic, reads.missing)
        return reads.done({"topic": topic, "queues": [
            {"broker_name": mq.broker_name, "queue_id": mq.queue_id, "min_offset": o.min_offset,
             "max_offset": o.max_offset, "last_store_timestamp": o.last_store_timestamp}
            for mq, o in offsets.items()],
            "route": [{"broker_name": q.broker_name, "read_queues": q.read_queue_nums,
                       "write_queues": q.write_queue_nums, "perm": PERM_NAMES.get(q.perm, str(q.perm))}
                      for q in route.queue_datas],
            "timers": self.client.pending_timers(topic, reads.missing),
            "groups": self._consumers_of(topic, reads) if offsets else []},
            answered=_any_answered(route, reads))

    def _route(self, topic: str) -> TopicRoute:
        """The topic's route; NotFound (a 404 page) for a topic no broker holds."""
        try:
            return self.client.query_route(topic)
        except RmqError as error:
            if error.code == rmq_pb2.TOPIC_NOT_EXIST:
                raise NotFound(f"topic {topic} does not exist") from None
            raise

    def _consumers_of(self, topic: str, reads: Reads) -> list[str]:
        """The groups (of the first MAX_GROUPS_CHECKED) with committed offsets on the topic or a live
        member subscribing to it, as far as the brokers that answer know them."""
        found = []
        for group in self.admin.groups(reads.missing)[:MAX_GROUPS_CHECKED]:
            try:
                subscribed = any(topic in m.subscriptions for m in self.admin.members(group, reads.missing))
            except RmqError:
                continue
            if subscribed or self._has_offsets(group, topic):
                found.append(group)
        return found

    def set_permission(self, topic: str, perm: str) -> None:
        """Make the topic read-write, read-only or write-only on every broker (maintenance)."""
        wanted = {name: value for value, name in PERM_NAMES.items()}.get(perm)
        if wanted is None:
            raise ValueError(f"permission must be one of {', '.join(PERM_NAMES.values())}, not {perm!r}")
        queues = max(q.write_queue_nums for q in self._route(topic).queue_datas)
        self.client.update_topic(topic, queues, wanted)

    def delete_topic(self, topic: str) -> None:
        self.client.delete_topic(topic)

    def send_test_message(self, topic: str, body: str, tags: str, keys: str) -> str:
        """Send one message (the page's "send a test message"); its message id."""
        if not body:
            raise ValueError("a test message needs a body")
        return self.client.send(topic, [OutgoingMessage(body.encode(), tags=tags, keys=keys)]).msg_ids[0]

    def create_topic(self, topic: str, queues: int) -> None:
        self.client.create_topic(topic, queues=queues)

    # ------------------------------------------------------------ groups
    def groups(self) -> dict[str, Any]:
        reads = Reads(self.client)
        listed = []
        for group in self.admin.groups(reads.missing):
            try:
                progress = self.admin.progress(group)
                members = self.admin.members(group, reads.missing)
            except RmqUnavailable:
                raise
            except RmqError:
                continue
            reads.unreachable.update(progress.unreachable)
            listed.append({"group": group, "members": len(members), "total_lag": progress.total_lag,
                           "topics": sorted({q.queue.topic for q in progress.queues
                                             if not retry.is_group_copy_topic(q.queue.topic)}),
                           "incomplete": not progress.complete})
        return reads.done({"groups": listed})

    def group(self, group: str, producer_group: str = "") -> dict[str, Any]:
        """The group's page; with `producer_group`, that producer group's live producers too."""
        reads = self._known_group(group)
        producers = self.admin.producers(producer_group, reads.missing) if producer_group else []
        progress = self.admin.progress(group)
        reads.unreachable.update(progress.unreachable)
        members = self.admin.members(group, reads.missing)
        dlq = self._dlq_size(group, reads)
        pulled = [t for topics in self.client.group_stats(group, reads.missing).values() for t in topics]
        return reads.done({
            "group": group,
            "consumed": sum(t.get_messages for t in pulled),
            "last_consume_ms": max((t.last_get_ms for t in pulled), default=0),
            "members": [{"client_id": m.client_id, "protocol": m.protocol.label, "address": m.address,
                         "broadcasting": m.broadcasting, "subscriptions": m.subscriptions,
                         "queues": [f"{q.topic}/{q.broker_name}/{q.queue_id}" for q in m.queues]}
                        for m in members],
            "queues": [{"topic": q.queue.topic, "broker_name": q.queue.broker_name,
                        "queue_id": q.queue.queue_id,
                        "min_offset": q.min_offset, "max_offset": q.max_offset,
                        "consumer_offset": q.consumer_offset, "lag": q.lag, "owner": q.owner}
                       for q in progress.queues],
            "total_lag": progress.total_lag,
            "retry_lag": sum(q.lag for q in progress.queues if retry.is_retry_topic(q.queue.topic)),
            "dlq_messages": dlq,
            "running": [running_info_view(client_id, info)
                        for client_id, info in self.admin.running_infos(group).items()],
            "settings": [{"broker_name": name, "consume_enable": s.consume_enable,
                          "retry_max_times": s.retry_max_times, "stored": s.stored}
                         for name, s in self.admin.group_settings(group, reads.missing).items()],
            "producer_group": producer_group,
            "producers": [{"client_id": p.client_id, "protocol": p.protocol.label, "address": p.address,
                           "language": p.language, "version": p.version}
                          for p in producers],
        })

    def _known_group(self, group: str) -> Reads:
        """The reads of a group's page once some broker knows the group: NotFound when none does
        and every broker answered, RmqUnavailable (503) when none answered."""
        reads = Reads(self.client)
        if group not in self.admin.groups(reads.missing):
            reads.done({})
            if reads.unreachable:
                raise RmqUnavailable(f"consumer group {group} is not known to the brokers that answered; "
                                     f"{reads.describe()} could not be asked")
            raise NotFound(f"consumer group {group} does not exist")
        return reads

    def _dlq_size(self, group: str, reads: Reads) -> int:
        try:
            offsets = self.client.topic_offsets(retry.dlq_topic(group), reads.missing)
            return sum(o.max_offset - o.min_offset for o in offsets.values())
        except RmqUnavailable:
            raise
        except RmqError:
            return 0

    def update_settings(self, group: str, consume_enable: bool, retry_max_times: int) -> None:
        """The group's settings on every broker (admin; RocketMQ updateSubGroup)."""
        self._known_group(group)
        self.admin.update_group_settings(group, consume_enable, retry_max_times)

    def reset(self, group: str, topic: str, to: str, force: bool) -> ResetReport:
        """Reset the group's offsets on `topic` ("": every topic it has offsets on; to latest:
        skip what has accumulated); its live rmq consumers adopt them."""
        return self.admin.reset_offsets(group, topic, ResetTarget.parse(to), force)

    # ------------------------------------------------------------ messages
    def messages(self, topic: str, key: str = "", begin_ms: int | None = None, end_ms: int | None = None,
                 page: int = 0, limit: int = 50) -> dict[str, Any]:
        route = self._route(topic)      # 404 for an unknown topic
        reads = Reads(self.client)
        if key:
            found = self.admin.query_by_key(topic, key, limit=limit, unreachable=reads.missing)
        else:
            found = self.admin.query_by_time(topic, begin_ms or 0, end_ms or 2**62, limit, page,
                                             reads.missing)
        data = {"topic": topic, "key": key, "page": page, "messages": [message_dict(m) for m in found]}
        return reads.done(data, answered=_any_answered(route, reads))

    def message(self, msg_id: str) -> dict[str, Any]:
        message = self._message(msg_id)
        reads = Reads(self.client)
        groups = [g for g in self.admin.groups(reads.missing)[:MAX_GROUPS_FOR_STATE]
                  if self._has_offsets(g, message.topic)]
        states = self.admin.consume_states(message, groups)
        return reads.done(message_dict(message) | {
            "track": [self._track(message, s.group, s.consumed, reads) for s in states],
            "timer": _timer_state(message)}, answered=True)

    def _message(self, msg_id: str) -> MessageExt:
        try:
            return self.admin.view(msg_id)
        except RmqUnavailable as error:      # the id names an address: say which broker that is
            raise RmqUnavailable(f"could not read message {msg_id}: {self._broker_at(error.broker)} "
                                 f"is unreachable ({error})") from None
        except RmqError as error:
            if isinstance(error, ConfigError) or error.code == rmq_pb2.QUERY_NOT_FOUND:
                raise NotFound(str(error)) from None
            raise

    def _track(self, message: MessageExt, group: str, consumed: bool, reads: Reads) -> dict[str, Any]:
        """What became of the message for one group: consumed or not, the copies in its retry topic
        and dead-letter queue (found by the message's unique id or first key; none without one)."""
        retries = self._copies(message, retry.retry_topic(group), reads)
        dead = self._copies(message, retry.dlq_topic(group), reads)
        if dead:
            state = "in the DLQ"
        elif retries:
            state = f"retried {len(retries)} time(s)"
        else:
            state = "consumed" if consumed else "not yet consumed"
        return {"group": group, "consumed": consumed, "state": state, "retries": [m.msg_id for m in retries],
                "dead_letters": [m.msg_id for m in dead]}

    def _copies(self, message: MessageExt, topic: str, reads: Reads) -> list[MessageExt]:
        key = message.properties.get(mf.PROPERTY_UNIQ_KEY) or (message.keys.split() or [""])[0]
        if not key:
            return []
        try:
            found = self.admin.query_by_key(topic, key, unreachable=reads.missing)
        except RmqError as error:
            if error.code == rmq_pb2.TOPIC_NOT_EXIST:
                return []
            raise
        return [copy for copy in found if copy.origin_msg_id == message.msg_id]

    def _broker_at(self, address: str | None) -> str:
        """`<broker name> <address>` for a member's address the name servers know, else the address."""
        with contextlib.suppress(RmqError):
            for name, members in self.client.list_broker_groups().items():
                if any(member.address == address for member in members):
                    return f"{name} {address}"
        return str(address)

    def resend_message(self, msg_id: str, group: str) -> str:
        """Deliver the message again to `group` only (its retry topic: RocketMQ's
        consumeMessageDirectly from the message track)."""
        return resend(self.client, self._message(msg_id), group)

    def _has_offsets(self, group: str, topic: str) -> bool:
        try:
            return bool(self.client.query_consumer_offsets(group, topic))
        except RmqError:
            return False

    # ------------------------------------------------------------ dead letters
    def dlq(self, group: str, page: int = 0) -> dict[str, Any]:
        reads = self._known_group(group)
        held = self._dlq_size(group, reads)
        letters = self.admin.dead_letters(group, DLQ_PAGE, page * DLQ_PAGE, reads.missing)
        return reads.done({"group": group, "page": page, "held": held,
                           "more": held > (page + 1) * DLQ_PAGE,
                           "messages": [message_dict(m) for m in letters]})

    def all_dead_letters(self, group: str) -> Iterator[dict[str, Any]]:
        """Every dead letter of the group, oldest first, read PAGE_MAX at a time."""
        skip = 0
        while page := self.admin.dead_letters(group, PAGE_MAX, skip):
            yield from (message_dict(m) for m in page)
            skip += len(page)

    def resend(self, group: str, msg_ids: list[str], only_group: bool) -> list[str]:
        """Publish the dead letters with these ids (or original ids) again; NotFound naming the
        first id no dead letter of the group has (nothing is resent then)."""
        wanted, found = set(msg_ids), dict[str, MessageExt]()
        skip = 0
        while wanted - set(found) and (page := self.admin.dead_letters(group, PAGE_MAX, skip)):
            for message in page:
                for msg_id in {message.msg_id, message.origin_msg_id} & wanted:
                    found.setdefault(msg_id, message)
            skip += len(page)
        missing = [msg_id for msg_id in msg_ids if msg_id not in found]
        if missing:
            raise NotFound(f"no dead letter of group {group} has id {missing[0]}")
        return [resend(self.client, found[msg_id], group if only_group else "") for msg_id in msg_ids]

    # ------------------------------------------------------------ charts
    def visible_series(self, snapshot: Series) -> Series:
        """The charts' series this view's account may see: topics it may read the offsets of,
        groups it may list the members of (the charts are sampled with the console's
        own identity, which may see more). A group is visible with SUB on it (its members' list)."""
        return {"tps": {t: v for t, v in snapshot["tps"].items() if self._may_see("topic", t)},
                **{kind: {g: v for g, v in snapshot[kind].items() if self._may_see("group", g)}
                   for kind in ("lag", "consume")}}

    def _may_see(self, kind: str, name: str) -> bool:
        now = time.monotonic()
        with self._visible_lock:
            known = self._visible.get((kind, name))
        if known is not None and known[1] > now:
            return known[0]
        try:
            if kind == "topic":
                self.client.topic_offsets(name)
            else:
                self.client.consumer_connections(name)
            seen = True
        except RmqUnavailable:
            return False          # not remembered: asked again once the cluster answers
        except RmqError:
            seen = False
        with self._visible_lock:
            self._visible[(kind, name)] = (seen, now + VISIBILITY_TTL_S)
        return seen

    def sample(self) -> Sample:
        """Messages ever stored per topic, total lag and messages pulled per group, for the charts."""
        stored = {}
        for config in self.client.list_topics():
            if not retry.is_group_copy_topic(config.topic_name):
                offsets = self.client.topic_offsets(config.topic_name)
                stored[config.topic_name] = sum(o.max_offset for o in offsets.values())
        groups = self.admin.groups()
        lag = {group: self.admin.progress(group).total_lag for group in groups}
        consumed = {group: sum(t.get_messages for topics in self.client.group_stats(group).values()
                               for t in topics) for group in groups}
        return Sample(stored, lag, consumed)

    # ------------------------------------------------------------ ACL
    def acl(self) -> dict[str, Any]:
        """Each broker's ACL: accounts and their permissions, never a secret key. Only an admin
        account may read it (NO_PERMISSION otherwise: a 403 page)."""
        reads, brokers = Reads(self.client), []
        for name, address in self.client.list_brokers().items():
            try:
                described = self.client.describe_acl(address)
            except RmqUnavailable as error:
                reads.missing[name] = error
                continue
            brokers.append({"name": name, "enabled": described.enabled,
                            "global_white_remote_addresses": list(described.global_white_remote_addresses),
                            "accounts": [_account_dict(a) for a in described.accounts]})
        return reads.done({"brokers": brokers}, bool(brokers) or not reads.missing)


def _any_answered(route: TopicRoute, reads: Reads) -> bool:
    """Whether some broker holding the topic answered (else its page read nothing: a 503)."""
    return bool(set(route.brokers) - set(reads.missing))


def message_dict(message: MessageExt) -> dict[str, Any]:
    return {"msg_id": message.msg_id, "origin_msg_id": message.origin_msg_id, "topic": message.topic,
            "broker_name": message.broker_name, "queue_id": message.queue_id,
            "queue_offset": message.queue_offset, "tags": message.tags, "keys": message.keys,
            "properties": dict(message.properties), "reconsume_times": message.reconsume_times,
            "born_timestamp": message.born_timestamp, "store_timestamp": message.store_timestamp,
            "body": message.body.decode("utf-8", errors="replace")}


def _account_dict(account: rmq_pb2.AclAccount) -> dict[str, Any]:
    return {"access_key": account.access_key, "admin": account.admin,
            "default_topic_perm": account.default_topic_perm,
            "default_group_perm": account.default_group_perm,
            "topic_perms": {p.name: p.perm for p in account.topic_perms},
            "group_perms": {p.name: p.perm for p in account.group_perms},
            "white_remote_address": account.white_remote_address, "broker_name": account.broker_name}


def _replication_lag(status: rmq_pb2.BrokerStatusResponse) -> int | None:
    if status.master_address:
        return max(status.master_max_offset - status.commit_log_max_offset, 0)
    if status.slaves:
        return max(s.lag_bytes for s in status.slaves)
    return None


TIMER_PROPERTIES = (("TIMER_DELIVER_MS", 0, 1), ("TIMER_DELAY_SEC", 1, 1000), ("TIMER_DELAY_MS", 1, 1))


def _timer_state(message: MessageExt) -> str:
    """A timer message's delivery time from its properties (TIMER_DELIVER_MS: an epoch ms;
    TIMER_DELAY_SEC / _MS: a delay after it was born); "" for an ordinary message."""
    for name, after_birth, unit_ms in TIMER_PROPERTIES:
        value = message.properties.get(name, "")
        if value.isdigit():
            due = after_birth * message.born_timestamp + int(value) * unit_ms
            passed = due <= time.time() * 1000
            return f"due {timestamp(due)}" + (" (due time passed)" if passed else " (waiting)")
    level = message.properties.get(mf.PROPERTY_DELAY_TIME_LEVEL, "")
    return f"delay level {level}" if level else ""


def running_info_view(client_id: str, info: rmq_pb2.ConsumerRunningInfo | str) -> dict[str, Any]:
    """One member's running info as the group page shows it (`error` when it was not had)."""
    if isinstance(info, str):
        return {"client_id": client_id, "error": info, "queues": []}
    return {"client_id": client_id, "error": "",
            "consume_type": "push" if info.consume_type == rmq_pb2.CONSUME_PASSIVELY else "pull",
            "orderly": info.orderly, "sdk_version": info.sdk_version,
            "queues": [{"queue": f"{q.queue.topic}/{q.queue.broker_name}/{q.queue.queue_id}",
                        "committed_offset": q.committed_offset, "cached_messages": q.cached_messages,
                        "cached_range": (f"{q.cached_min_offset}-{q.cached_max_offset}"
                                         if q.cached_messages else "-"),
                        "last_pull": timestamp(q.last_pull_ms), "last_consume": timestamp(q.last_consume_ms)}
                       for q in info.queues]}
