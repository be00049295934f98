"""ConsumerManageProcessor (RocketMQ's): a group's consumer list and its committed offsets, for
every protocol's adapter (rmq.v1 QueryConsumerOffsets / UpdateConsumerOffsets / RemoveConsumerOffsets
/ GetConsumerList; 4.x QUERY_CONSUMER_OFFSET / UPDATE_CONSUMER_OFFSET / GET_CONSUMER_LIST_BY_GROUP;
RocketMQ 5 QueryOffset / UpdateOffset), an admin's offset reset (rmq.v1 ResetConsumerOffsets,
RocketMQ's resetOffset), which is committed and then told to the group's live rmq consumers over
their membership watches, and a consumer's running info (GetConsumerRunningInfo, asked of it over
the same watch; ReportRunningInfo is its answer). Every offset of an update is checked before any
is stored."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from rmq.broker_server.errors import BrokerError, illegal_argument
from rmq.broker_server.offsets.consumer_ids_watch import ConsumerIdsWatchService
from rmq.broker_server.offsets.consumer_manager import ConsumerManager
from rmq.broker_server.offsets.consumer_offset_manager import ConsumerOffsetManager, OffsetKey
from rmq.broker_server.processors.client_manage_processor import check_client_id
from rmq.broker_server.processors.names import check_group_name
from rmq.broker_server.processors.topic_config_manager import TopicConfigManager
from rmq.broker_server.security.caller import account_key
from rmq.topic_config import TopicConfig
from rmq.v1 import rmq_pb2


class ResetTeller(Protocol):
    """A protocol adapter that tells its live consumers of a reset (4.x remoting:
    RESET_CONSUMER_CLIENT_OFFSET)."""

    def tellable(self, group: str) -> set[str]:
        """The group's client ids it can tell."""

    def tell_reset(self, group: str, offsets: Mapping[tuple[str, int], int]) -> list[str]:
        """Tell them that the group's offsets are now `offsets`; returns their client ids."""


@dataclass(frozen=True)
class ResetOutcome:
    notified: list[str]
    untold: list[str]      # live clustering members no notifier could tell (a forced reset)


def check_queue(config: TopicConfig, queue_id: int) -> None:
    """ILLEGAL_ARGUMENT unless the topic has a read queue `queue_id`."""
    if not 0 <= queue_id < config.read_queue_nums:
        raise illegal_argument(
            f"queue_id {queue_id} is out of range: topic {config.topic_name!r} has "
            f"{config.read_queue_nums} read queues"
        )


class ConsumerManageProcessor:
    def __init__(self, topics: TopicConfigManager, offsets: ConsumerOffsetManager,
                 consumers: ConsumerManager, watches: ConsumerIdsWatchService) -> None:
        """`watches`: the rmq.v1 consumers' membership watches, which carry resets and running-info
        questions to them."""
        self.topics = topics
        self.offsets = offsets
        self.consumers = consumers
        self.watches = watches
        self._tellers: list[ResetTeller] = []

    def add_reset_teller(self, teller: ResetTeller) -> None:
        self._tellers.append(teller)

    def watch_consumer_ids(self, group: str, client_id: str, adopts_resets: bool
                           ) -> AsyncIterator[rmq_pb2.ConsumerIdsChanged]:
        """rmq.v1 WatchConsumerIds: the group's client ids now and after every change (and its
        offset resets and running-info questions when the client `adopts_resets`); a bad client id
        or group name raises its leaf before anything is held."""
        check_client_id(client_id)
        check_group_name(group)
        return self.watches.watch(group, client_id, adopts_resets)

    def consumer_list(self, group: str) -> list[str]:
        check_group_name(group)
        return self.consumers.consumer_list(group)

    def query_offsets(self, group: str, topic: str = "") -> dict[OffsetKey, int]:
        """The group's committed offsets (of `topic`, or of every topic when it is "")."""
        check_group_name(group)
        if topic:
            self.topics.require(topic)
        return self.offsets.query_offsets(group, topic)

    def query_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        """One queue's committed offset, None when the group has none there."""
        return self.query_offsets(group, topic).get(OffsetKey(group, topic, queue_id))

    def update_offsets(self, group: str, offsets: Mapping[tuple[str, int], int], increase_only: bool = False
                       ) -> None:
        """Commit {(topic, queue id): offset} for the group, all or none, under the caller's
        account's share of the offset table."""
        check_group_name(group)
        for (topic, queue_id), offset in offsets.items():   # all checked before any is stored
            check_queue(self.topics.require(topic), queue_id)
            if offset < 0:
                raise illegal_argument(
                    f"offset for {topic} queue {queue_id} must not be negative, not {offset}")
        self.offsets.commit_client_offsets(
            account_key(), {OffsetKey(group, topic, queue_id): offset
                            for (topic, queue_id), offset in offsets.items()},
            increase_only=increase_only)

    def reset_offsets(self, group: str, offsets: Mapping[tuple[str, int], int], force: bool = False
                      ) -> ResetOutcome:
        """RocketMQ's resetOffset: commit {(topic, queue id): offset} over whatever the group
        committed (smaller offsets included), then tell its live consumers, which adopt them
        instead of committing their own positions over them. Refused, nothing committed, while a
        live clustering member cannot be told (it would commit over the reset), unless `force`."""
        check_group_name(group)
        watching = self.watches.watching(group).union(*(teller.tellable(group) for teller in self._tellers))
        untold = sorted(info.client_id for info in self.consumers.connections(group)
                        if info.message_model != rmq_pb2.BROADCASTING and info.client_id not in watching)
        if untold and not force:
            shown = ", ".join(untold[:3]) + (", ..." if len(untold) > 3 else "")
            raise illegal_argument(
                f"consumer group {group} has {len(untold)} live member(s) that cannot be told of a reset "
                f"({shown}: RocketMQ 5 clients, Spark queries, or rmq clients without a membership watch): "
                "stop them first, or force the reset (their next commits may overwrite it)")
        self.update_offsets(group, offsets)
        keys = {OffsetKey(group, topic, queue_id): offset for (topic, queue_id), offset in offsets.items()}
        notified = self.watches.notify_reset(group, keys)
        for teller in self._tellers:
            notified += teller.tell_reset(group, offsets)
        return ResetOutcome(sorted(notified), untold)

    async def running_info(self, group: str, client_id: str) -> rmq_pb2.ConsumerRunningInfo:
        """GET_CONSUMER_RUNNING_INFO of a live rmq consumer, asked over its membership watch."""
        check_group_name(group)
        check_client_id(client_id)
        return await self.watches.ask_running_info(group, client_id)

    def check_online(self, group: str, client_id: str) -> None:
        """Whether a consumer can be asked for its running info over its own connection (the 4.x
        GET_CONSUMER_RUNNING_INFO; RocketMQ's AdminBrokerProcessor#getConsumerRunningInfo via
        Broker2Client): it is a live member of `group`, else SYSTEM_ERROR "not online"."""
        check_group_name(group)
        check_client_id(client_id)
        if all(info.client_id != client_id for info in self.consumers.connections(group)):
            raise BrokerError(rmq_pb2.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online")

    def report_running_info(self, request: rmq_pb2.ReportRunningInfoRequest) -> None:
        """The client's answer to a running-info question."""
        check_group_name(request.consumer_group)
        check_client_id(request.client_id)
        self.watches.answer_running_info(request.consumer_group, request.client_id, request.request_id,
                                         request.info)

    def remove_offsets(self, group: str, queues: list[tuple[str, int]]) -> None:
        check_group_name(group)
        for topic, queue_id in queues:
            self.offsets.remove_offset(group, topic, queue_id)
