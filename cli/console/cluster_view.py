"""What the console shows, as plain dicts the HTML pages and the JSON API share, read through the
signed-in account's client: what that account may not see is left out (a refused topic is not
listed) or answered 403/404."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from rmq import retry
from rmq.connector.admin import MQAdmin, ResetTarget, resend
from rmq.connector.client import RmqClient
from rmq.connector.errors import ConfigError, RmqError, RmqUnavailable
from rmq.connector.message import MessageExt
from rmq.v1 import rmq_pb2

TOPICS_PAGE = 50
MAX_GROUPS_FOR_STATE = 20     # groups whose consume state a message page shows


class NotFound(Exception):
    """An unknown topic, group or message in a URL: the page says which."""


class ClusterView:
    def __init__(self, client: RmqClient) -> None:
        self.client = client
        self.admin = MQAdmin(client)

    # ------------------------------------------------------------ cluster
    def cluster(self) -> dict[str, Any]:
        brokers = []
        for name, members in self.client.list_broker_groups().items():
            rows = []
            for member in members:
                row: dict[str, Any] = {"broker_id": member.broker_id, "address": member.address,
                                       "role": rmq_pb2.BrokerRole.Name(member.role)}
                try:
                    status = self.client.broker_status(member.address)
                    row |= {"min_offset": status.commit_log_min_offset,
                            "max_offset": status.commit_log_max_offset,
                            "replication_lag": _replication_lag(status), "error": status.replication_error}
                except RmqError as error:
                    row |= {"error": str(error)}
                rows.append(row)
            brokers.append({"name": name, "members": rows})
        return {"brokers": brokers}

    # ------------------------------------------------------------ topics
    def topics(self, page: int = 0) -> dict[str, Any]:
        configs = sorted(self.client.list_topics(), key=lambda t: t.topic_name)
        visible = []
        for config in configs[page * TOPICS_PAGE:(page + 1) * TOPICS_PAGE]:
            try:
                offsets = self.client.topic_offsets(config.topic_name)
            except RmqUnavailable:
                raise
            except RmqError:      # not this account's to see (or deleted meanwhile)
                continue
            visible.append({"topic": config.topic_name, "queues": len(offsets),
                            "messages": sum(o.max_offset - o.min_offset for o in offsets.values()),
                            "system": retry.is_group_copy_topic(config.topic_name)})
        return {"topics": visible, "page": page, "more": len(configs) > (page + 1) * TOPICS_PAGE}

    def topic(self, topic: str) -> dict[str, Any]:
        try:
            offsets = self.client.topic_offsets(topic)
        except RmqError as error:
            if error.code == rmq_pb2.TOPIC_NOT_EXIST:
                raise NotFound(f"topic {topic} does not exist") from None
            raise
        return {"topic": topic, "queues": [
            {"broker_name": mq.broker_name, "queue_id": mq.queue_id, "min_offset": o.min_offset,
             "max_offset": o.max_offset, "last_store_timestamp": o.last_store_timestamp}
            for mq, o in offsets.items()]}

    def create_topic(self, topic: str, queues: int) -> None:
        self.client.create_topic(topic, queues=queues)

    # ------------------------------------------------------------ groups
    def groups(self) -> dict[str, Any]:
        listed = []
        for group in self.admin.groups():
            try:
                progress = self.admin.progress(group)
                members = self.admin.members(group)
            except RmqUnavailable:
                raise
            except RmqError:
                continue
            listed.append({"group": group, "members": len(members), "total_lag": progress.total_lag,
                           "topics": sorted({q.queue.topic for q in progress.queues
                                             if not retry.is_group_copy_topic(q.queue.topic)})})
        return {"groups": listed}

    def group(self, group: str) -> dict[str, Any]:
        if group not in self.admin.groups():
            raise NotFound(f"consumer group {group} does not exist")
        progress = self.admin.progress(group)
        members = self.admin.members(group)
        dlq = self._dlq_size(group)
        return {
            "group": group,
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
            "unreachable": progress.unreachable,
        }

    def _dlq_size(self, group: str) -> int:
        try:
            offsets = self.client.topic_offsets(retry.dlq_topic(group))
            return sum(o.max_offset - o.min_offset for o in offsets.values())
        except RmqError:
            return 0

    def reset(self, group: str, topic: str, to: str, force: bool) -> list[dict[str, Any]]:
        results = self.admin.reset_offsets(group, topic, ResetTarget.parse(to), force)
        return [{"broker_name": r.queue.broker_name, "queue_id": r.queue.queue_id, "offset": r.offset,
                 "note": r.note} for r in results]

    # ------------------------------------------------------------ messages
    def messages(self, topic: str, key: str = "", begin_ms: int | None = None, end_ms: int | None = None,
                 page: int = 0, limit: int = 50) -> dict[str, Any]:
        self.topic(topic)      # 404 for an unknown topic
        if key:
            found = self.admin.query_by_key(topic, key, limit=limit)
        else:
            found = self.admin.query_by_time(topic, begin_ms or 0, end_ms or 2**62, limit, page)
        return {"topic": topic, "key": key, "page": page, "messages": [message_dict(m) for m in found]}

    def message(self, msg_id: str) -> dict[str, Any]:
        try:
            message = self.admin.view(msg_id)
        except RmqError as error:
            if isinstance(error, ConfigError) or error.code == rmq_pb2.QUERY_NOT_FOUND:
                raise NotFound(str(error)) from None
            raise
        groups = [g for g in self.admin.groups()[:MAX_GROUPS_FOR_STATE]
                  if self._has_offsets(g, message.topic)]
        states = self.admin.consume_states(message, groups)
        return message_dict(message) | {"consume_state": [asdict(s) for s in states]}

    def _has_offsets(self, group: str, topic: str) -> bool:
        try:
            return bool(self.client.query_consumer_offsets(group, topic))
        except RmqError:
            return False

    # ------------------------------------------------------------ dead letters
    def dlq(self, group: str) -> dict[str, Any]:
        if group not in self.admin.groups():
            raise NotFound(f"consumer group {group} does not exist")
        return {"group": group, "messages": [message_dict(m) for m in self.admin.dead_letters(group)]}

    def resend(self, group: str, msg_id: str, only_group: bool) -> str:
        for message in self.admin.dead_letters(group):
            if msg_id in (message.msg_id, message.origin_msg_id):
                return resend(self.client, message, group if only_group else "")
        raise NotFound(f"no dead letter of group {group} has id {msg_id}")

    # ------------------------------------------------------------ charts
    def sample(self) -> tuple[dict[str, int], dict[str, int]]:
        """(messages ever stored per topic, total lag per group), for the charts."""
        stored = {}
        for config in self.client.list_topics():
            if not retry.is_group_copy_topic(config.topic_name):
                offsets = self.client.topic_offsets(config.topic_name)
                stored[config.topic_name] = sum(o.max_offset for o in offsets.values())
        lag = {group: self.admin.progress(group).total_lag for group in self.admin.groups()}
        return stored, lag


def message_dict(message: MessageExt) -> dict[str, Any]:
    return {"msg_id": message.msg_id, "origin_msg_id": message.origin_msg_id, "topic": message.topic,
            "broker_name": message.broker_name, "queue_id": message.queue_id,
            "queue_offset": message.queue_offset, "tags": message.tags, "keys": message.keys,
            "properties": dict(message.properties), "reconsume_times": message.reconsume_times,
            "born_timestamp": message.born_timestamp, "store_timestamp": message.store_timestamp,
            "body": message.body.decode("utf-8", errors="replace")}


def _replication_lag(status: rmq_pb2.BrokerStatusResponse) -> int | None:
    if status.master_address:
        return max(status.master_max_offset - status.commit_log_max_offset, 0)
    if status.slaves:
        return max(s.lag_bytes for s in status.slaves)
    return None
