from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Code(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OK: _ClassVar[Code]
    ILLEGAL_ARGUMENT: _ClassVar[Code]
    TOPIC_NOT_EXIST: _ClassVar[Code]
    TOPIC_ILLEGAL: _ClassVar[Code]
    TOPIC_ALREADY_EXISTS: _ClassVar[Code]
    MESSAGE_ILLEGAL: _ClassVar[Code]
    MESSAGE_SIZE_EXCEEDED: _ClassVar[Code]
    PROPERTIES_SIZE_EXCEEDED: _ClassVar[Code]
    FLUSH_DISK_TIMEOUT: _ClassVar[Code]
    SERVICE_NOT_AVAILABLE: _ClassVar[Code]
    NO_PERMISSION: _ClassVar[Code]
    QUERY_NOT_FOUND: _ClassVar[Code]
    GROUP_ILLEGAL: _ClassVar[Code]
    SYSTEM_ERROR: _ClassVar[Code]
    SUBSCRIPTION_GROUP_NOT_EXIST: _ClassVar[Code]
    TOO_MANY_WATCHERS: _ClassVar[Code]
    SUBSCRIPTION_PARSE_FAILED: _ClassVar[Code]
    FILTER_NOT_SUPPORTED: _ClassVar[Code]
    FLUSH_SLAVE_TIMEOUT: _ClassVar[Code]
    SLAVE_NOT_AVAILABLE: _ClassVar[Code]
    LIMIT_EXCEEDED: _ClassVar[Code]
    WHEEL_TIMER_MSG_ILLEGAL: _ClassVar[Code]
    WHEEL_TIMER_FLOW_CONTROL: _ClassVar[Code]

class PullSysFlag(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PULL_SYS_FLAG_NONE: _ClassVar[PullSysFlag]
    FLAG_COMMIT_OFFSET: _ClassVar[PullSysFlag]
    FLAG_SUSPEND: _ClassVar[PullSysFlag]
    FLAG_SUBSCRIPTION: _ClassVar[PullSysFlag]
    FLAG_CLASS_FILTER: _ClassVar[PullSysFlag]

class ExpressionType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TAG: _ClassVar[ExpressionType]
    SQL92: _ClassVar[ExpressionType]

class PullStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FOUND: _ClassVar[PullStatus]
    NO_NEW_MSG: _ClassVar[PullStatus]
    NO_MATCHED_MSG: _ClassVar[PullStatus]
    OFFSET_ILLEGAL: _ClassVar[PullStatus]

class GetMessageStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GMS_FOUND: _ClassVar[GetMessageStatus]
    GMS_NO_MATCHED_MESSAGE: _ClassVar[GetMessageStatus]
    GMS_MESSAGE_WAS_REMOVING: _ClassVar[GetMessageStatus]
    GMS_OFFSET_FOUND_NULL: _ClassVar[GetMessageStatus]
    GMS_OFFSET_OVERFLOW_BADLY: _ClassVar[GetMessageStatus]
    GMS_OFFSET_OVERFLOW_ONE: _ClassVar[GetMessageStatus]
    GMS_OFFSET_TOO_SMALL: _ClassVar[GetMessageStatus]
    GMS_NO_MATCHED_LOGIC_QUEUE: _ClassVar[GetMessageStatus]
    GMS_NO_MESSAGE_IN_QUEUE: _ClassVar[GetMessageStatus]

class MessageModel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CLUSTERING: _ClassVar[MessageModel]
    BROADCASTING: _ClassVar[MessageModel]

class ConsumeType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONSUME_TYPE_UNSPECIFIED: _ClassVar[ConsumeType]
    CONSUME_PASSIVELY: _ClassVar[ConsumeType]
    CONSUME_ACTIVELY: _ClassVar[ConsumeType]

class BrokerRole(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ASYNC_MASTER: _ClassVar[BrokerRole]
    SYNC_MASTER: _ClassVar[BrokerRole]
    SLAVE: _ClassVar[BrokerRole]

class ClientProtocol(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CLIENT_PROTOCOL_UNSPECIFIED: _ClassVar[ClientProtocol]
    CLIENT_PROTOCOL_RMQ: _ClassVar[ClientProtocol]
    CLIENT_PROTOCOL_ROCKETMQ_V2: _ClassVar[ClientProtocol]
    CLIENT_PROTOCOL_REMOTING: _ClassVar[ClientProtocol]
OK: Code
ILLEGAL_ARGUMENT: Code
TOPIC_NOT_EXIST: Code
TOPIC_ILLEGAL: Code
TOPIC_ALREADY_EXISTS: Code
MESSAGE_ILLEGAL: Code
MESSAGE_SIZE_EXCEEDED: Code
PROPERTIES_SIZE_EXCEEDED: Code
FLUSH_DISK_TIMEOUT: Code
SERVICE_NOT_AVAILABLE: Code
NO_PERMISSION: Code
QUERY_NOT_FOUND: Code
GROUP_ILLEGAL: Code
SYSTEM_ERROR: Code
SUBSCRIPTION_GROUP_NOT_EXIST: Code
TOO_MANY_WATCHERS: Code
SUBSCRIPTION_PARSE_FAILED: Code
FILTER_NOT_SUPPORTED: Code
FLUSH_SLAVE_TIMEOUT: Code
SLAVE_NOT_AVAILABLE: Code
LIMIT_EXCEEDED: Code
WHEEL_TIMER_MSG_ILLEGAL: Code
WHEEL_TIMER_FLOW_CONTROL: Code
PULL_SYS_FLAG_NONE: PullSysFlag
FLAG_COMMIT_OFFSET: PullSysFlag
FLAG_SUSPEND: PullSysFlag
FLAG_SUBSCRIPTION: PullSysFlag
FLAG_CLASS_FILTER: PullSysFlag
TAG: ExpressionType
SQL92: ExpressionType
FOUND: PullStatus
NO_NEW_MSG: PullStatus
NO_MATCHED_MSG: PullStatus
OFFSET_ILLEGAL: PullStatus
GMS_FOUND: GetMessageStatus
GMS_NO_MATCHED_MESSAGE: GetMessageStatus
GMS_MESSAGE_WAS_REMOVING: GetMessageStatus
GMS_OFFSET_FOUND_NULL: GetMessageStatus
GMS_OFFSET_OVERFLOW_BADLY: GetMessageStatus
GMS_OFFSET_OVERFLOW_ONE: GetMessageStatus
GMS_OFFSET_TOO_SMALL: GetMessageStatus
GMS_NO_MATCHED_LOGIC_QUEUE: GetMessageStatus
GMS_NO_MESSAGE_IN_QUEUE: GetMessageStatus
CLUSTERING: MessageModel
BROADCASTING: MessageModel
CONSUME_TYPE_UNSPECIFIED: ConsumeType
CONSUME_PASSIVELY: ConsumeType
CONSUME_ACTIVELY: ConsumeType
ASYNC_MASTER: BrokerRole
SYNC_MASTER: BrokerRole
SLAVE: BrokerRole
CLIENT_PROTOCOL_UNSPECIFIED: ClientProtocol
CLIENT_PROTOCOL_RMQ: ClientProtocol
CLIENT_PROTOCOL_ROCKETMQ_V2: ClientProtocol
CLIENT_PROTOCOL_REMOTING: ClientProtocol

class Status(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: Code
    message: str
    def __init__(self, code: _Optional[_Union[Code, str]] = ..., message: _Optional[str] = ...) -> None: ...

class MessageQueue(_message.Message):
    __slots__ = ("topic", "broker_name", "queue_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    broker_name: str
    queue_id: int
    def __init__(self, topic: _Optional[str] = ..., broker_name: _Optional[str] = ..., queue_id: _Optional[int] = ...) -> None: ...

class TopicConfig(_message.Message):
    __slots__ = ("topic_name", "read_queue_nums", "write_queue_nums", "perm")
    TOPIC_NAME_FIELD_NUMBER: _ClassVar[int]
    READ_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    topic_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    def __init__(self, topic_name: _Optional[str] = ..., read_queue_nums: _Optional[int] = ..., write_queue_nums: _Optional[int] = ..., perm: _Optional[int] = ...) -> None: ...

class Message(_message.Message):
    __slots__ = ("body", "tags", "keys", "properties", "queue_id", "flag", "born_timestamp", "delay_level")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    BODY_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    FLAG_FIELD_NUMBER: _ClassVar[int]
    BORN_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    DELAY_LEVEL_FIELD_NUMBER: _ClassVar[int]
    body: bytes
    tags: str
    keys: str
    properties: _containers.ScalarMap[str, str]
    queue_id: int
    flag: int
    born_timestamp: int
    delay_level: int
    def __init__(self, body: _Optional[bytes] = ..., tags: _Optional[str] = ..., keys: _Optional[str] = ..., properties: _Optional[_Mapping[str, str]] = ..., queue_id: _Optional[int] = ..., flag: _Optional[int] = ..., born_timestamp: _Optional[int] = ..., delay_level: _Optional[int] = ...) -> None: ...

class SendMessageRequest(_message.Message):
    __slots__ = ("topic", "messages", "columns")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    columns: MessageColumns
    def __init__(self, topic: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ..., columns: _Optional[_Union[MessageColumns, _Mapping]] = ...) -> None: ...

class MessageColumns(_message.Message):
    __slots__ = ("bodies", "body_lengths", "tags", "keys")
    BODIES_FIELD_NUMBER: _ClassVar[int]
    BODY_LENGTHS_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    bodies: bytes
    body_lengths: _containers.RepeatedScalarFieldContainer[int]
    tags: _containers.RepeatedScalarFieldContainer[str]
    keys: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, bodies: _Optional[bytes] = ..., body_lengths: _Optional[_Iterable[int]] = ..., tags: _Optional[_Iterable[str]] = ..., keys: _Optional[_Iterable[str]] = ...) -> None: ...

class SendMessageResponse(_message.Message):
    __slots__ = ("status", "msg_ids", "queue_ids", "queue_offsets", "recall_handles")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MSG_IDS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_IDS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    RECALL_HANDLES_FIELD_NUMBER: _ClassVar[int]
    status: Status
    msg_ids: _containers.RepeatedScalarFieldContainer[str]
    queue_ids: _containers.RepeatedScalarFieldContainer[int]
    queue_offsets: _containers.RepeatedScalarFieldContainer[int]
    recall_handles: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., msg_ids: _Optional[_Iterable[str]] = ..., queue_ids: _Optional[_Iterable[int]] = ..., queue_offsets: _Optional[_Iterable[int]] = ..., recall_handles: _Optional[_Iterable[str]] = ...) -> None: ...

class RecallMessageRequest(_message.Message):
    __slots__ = ("topic", "recall_handle")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    RECALL_HANDLE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    recall_handle: str
    def __init__(self, topic: _Optional[str] = ..., recall_handle: _Optional[str] = ...) -> None: ...

class RecallMessageResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ...) -> None: ...

class PullMessageRequest(_message.Message):
    __slots__ = ("consumer_group", "topic", "queue_id", "queue_offset", "max_messages", "max_bytes", "sys_flag", "suspend_timeout_ms", "commit_offset", "sub_expression", "expression_type")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    SYS_FLAG_FIELD_NUMBER: _ClassVar[int]
    SUSPEND_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    COMMIT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SUB_EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    EXPRESSION_TYPE_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_messages: int
    max_bytes: int
    sys_flag: int
    suspend_timeout_ms: int
    commit_offset: int
    sub_expression: str
    expression_type: ExpressionType
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ..., max_messages: _Optional[int] = ..., max_bytes: _Optional[int] = ..., sys_flag: _Optional[int] = ..., suspend_timeout_ms: _Optional[int] = ..., commit_offset: _Optional[int] = ..., sub_expression: _Optional[str] = ..., expression_type: _Optional[_Union[ExpressionType, str]] = ...) -> None: ...

class PackedMessages(_message.Message):
    __slots__ = ("count", "sizes", "records")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    SIZES_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    count: int
    sizes: bytes
    records: bytes
    def __init__(self, count: _Optional[int] = ..., sizes: _Optional[bytes] = ..., records: _Optional[bytes] = ...) -> None: ...

class PullMessageResponse(_message.Message):
    __slots__ = ("status", "pull_status", "store_status", "next_begin_offset", "min_offset", "max_offset", "messages", "suggest_which_broker_id")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    PULL_STATUS_FIELD_NUMBER: _ClassVar[int]
    STORE_STATUS_FIELD_NUMBER: _ClassVar[int]
    NEXT_BEGIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    SUGGEST_WHICH_BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    status: Status
    pull_status: PullStatus
    store_status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: PackedMessages
    suggest_which_broker_id: int
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., pull_status: _Optional[_Union[PullStatus, str]] = ..., store_status: _Optional[_Union[GetMessageStatus, str]] = ..., next_begin_offset: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., messages: _Optional[_Union[PackedMessages, _Mapping]] = ..., suggest_which_broker_id: _Optional[int] = ...) -> None: ...

class FlightReadTicket(_message.Message):
    __slots__ = ("pull", "end_offset", "max_rows", "max_bytes", "packed", "columns")
    PULL_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_ROWS_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    PACKED_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    pull: PullMessageRequest
    end_offset: int
    max_rows: int
    max_bytes: int
    packed: bool
    columns: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, pull: _Optional[_Union[PullMessageRequest, _Mapping]] = ..., end_offset: _Optional[int] = ..., max_rows: _Optional[int] = ..., max_bytes: _Optional[int] = ..., packed: _Optional[bool] = ..., columns: _Optional[_Iterable[str]] = ...) -> None: ...

class QueueOffsets(_message.Message):
    __slots__ = ("queue_id", "min_offset", "max_offset", "last_store_timestamp")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_STORE_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    min_offset: int
    max_offset: int
    last_store_timestamp: int
    def __init__(self, queue_id: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., last_store_timestamp: _Optional[int] = ...) -> None: ...

class GetTopicOffsetsRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class GetTopicOffsetsResponse(_message.Message):
    __slots__ = ("status", "queues", "pending_timers")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    PENDING_TIMERS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    queues: _containers.RepeatedCompositeFieldContainer[QueueOffsets]
    pending_timers: int
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., queues: _Optional[_Iterable[_Union[QueueOffsets, _Mapping]]] = ..., pending_timers: _Optional[int] = ...) -> None: ...

class SearchOffsetRequest(_message.Message):
    __slots__ = ("topic", "queue_id", "timestamp")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    timestamp: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., timestamp: _Optional[int] = ...) -> None: ...

class SearchOffsetResponse(_message.Message):
    __slots__ = ("status", "offset")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    status: Status
    offset: int
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., offset: _Optional[int] = ...) -> None: ...

class ConsumerOffset(_message.Message):
    __slots__ = ("topic", "queue_id", "offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    offset: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class QueryConsumerOffsetsRequest(_message.Message):
    __slots__ = ("consumer_group", "topic")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ...) -> None: ...

class QueryConsumerOffsetsResponse(_message.Message):
    __slots__ = ("status", "offsets")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    offsets: _containers.RepeatedCompositeFieldContainer[ConsumerOffset]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., offsets: _Optional[_Iterable[_Union[ConsumerOffset, _Mapping]]] = ...) -> None: ...

class UpdateConsumerOffsetsRequest(_message.Message):
    __slots__ = ("consumer_group", "offsets", "increase_only")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    INCREASE_ONLY_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    offsets: _containers.RepeatedCompositeFieldContainer[ConsumerOffset]
    increase_only: bool
    def __init__(self, consumer_group: _Optional[str] = ..., offsets: _Optional[_Iterable[_Union[ConsumerOffset, _Mapping]]] = ..., increase_only: _Optional[bool] = ...) -> None: ...

class UpdateConsumerOffsetsResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ...) -> None: ...

class RemoveConsumerOffsetsRequest(_message.Message):
    __slots__ = ("consumer_group", "offsets")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    offsets: _containers.RepeatedCompositeFieldContainer[ConsumerOffset]
    def __init__(self, consumer_group: _Optional[str] = ..., offsets: _Optional[_Iterable[_Union[ConsumerOffset, _Mapping]]] = ...) -> None: ...

class RemoveConsumerOffsetsResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ...) -> None: ...

class Subscription(_message.Message):
    __slots__ = ("topic", "sub_expression", "expression_type")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SUB_EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    EXPRESSION_TYPE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    sub_expression: str
    expression_type: ExpressionType
    def __init__(self, topic: _Optional[str] = ..., sub_expression: _Optional[str] = ..., expression_type: _Optional[_Union[ExpressionType, str]] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("client_id", "consumer_group", "message_model", "subscriptions")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_MODEL_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    consumer_group: str
    message_model: MessageModel
    subscriptions: _containers.RepeatedCompositeFieldContainer[Subscription]
    def __init__(self, client_id: _Optional[str] = ..., consumer_group: _Optional[str] = ..., message_model: _Optional[_Union[MessageModel, str]] = ..., subscriptions: _Optional[_Iterable[_Union[Subscription, _Mapping]]] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ...) -> None: ...

class UnregisterClientRequest(_message.Message):
    __slots__ = ("client_id", "consumer_group")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    consumer_group: str
    def __init__(self, client_id: _Optional[str] = ..., consumer_group: _Optional[str] = ...) -> None: ...

class UnregisterClientResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ...) -> None: ...

class GetConsumerListRequest(_message.Message):
    __slots__ = ("consumer_group",)
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    def __init__(self, consumer_group: _Optional[str] = ...) -> None: ...

class GetConsumerListResponse(_message.Message):
    __slots__ = ("status", "client_ids")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_IDS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    client_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., client_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class LockBatchRequest(_message.Message):
    __slots__ = ("consumer_group", "client_id", "queues")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    client_id: str
    queues: _containers.RepeatedCompositeFieldContainer[MessageQueue]
    def __init__(self, consumer_group: _Optional[str] = ..., client_id: _Optional[str] = ..., queues: _Optional[_Iterable[_Union[MessageQueue, _Mapping]]] = ...) -> None: ...

class LockBatchResponse(_message.Message):
    __slots__ = ("status", "locked_queues")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LOCKED_QUEUES_FIELD_NUMBER: _ClassVar[int]
    status: Status
    locked_queues: _containers.RepeatedCompositeFieldContainer[MessageQueue]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., locked_queues: _Optional[_Iterable[_Union[MessageQueue, _Mapping]]] = ...) -> None: ...

class UnlockBatchRequest(_message.Message):
    __slots__ = ("consumer_group", "client_id", "queues")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    client_id: str
    queues: _containers.RepeatedCompositeFieldContainer[MessageQueue]
    def __init__(self, consumer_group: _Optional[str] = ..., client_id: _Optional[str] = ..., queues: _Optional[_Iterable[_Union[MessageQueue, _Mapping]]] = ...) -> None: ...

class UnlockBatchResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ...) -> None: ...

class WatchConsumerIdsRequest(_message.Message):
    __slots__ = ("client_id", "consumer_group", "adopts_offset_resets")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    ADOPTS_OFFSET_RESETS_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    consumer_group: str
    adopts_offset_resets: bool
    def __init__(self, client_id: _Optional[str] = ..., consumer_group: _Optional[str] = ..., adopts_offset_resets: _Optional[bool] = ...) -> None: ...

class ConsumerIdsChanged(_message.Message):
    __slots__ = ("status", "client_ids", "reset_offsets", "running_info_request")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_IDS_FIELD_NUMBER: _ClassVar[int]
    RESET_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    RUNNING_INFO_REQUEST_FIELD_NUMBER: _ClassVar[int]
    status: Status
    client_ids: _containers.RepeatedScalarFieldContainer[str]
    reset_offsets: _containers.RepeatedCompositeFieldContainer[ConsumerOffset]
    running_info_request: str
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., client_ids: _Optional[_Iterable[str]] = ..., reset_offsets: _Optional[_Iterable[_Union[ConsumerOffset, _Mapping]]] = ..., running_info_request: _Optional[str] = ...) -> None: ...

class ProcessQueueInfo(_message.Message):
    __slots__ = ("queue", "committed_offset", "cached_messages", "cached_bytes", "cached_min_offset", "cached_max_offset", "last_pull_ms", "last_consume_ms", "locked")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CACHED_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    CACHED_BYTES_FIELD_NUMBER: _ClassVar[int]
    CACHED_MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CACHED_MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_PULL_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_CONSUME_MS_FIELD_NUMBER: _ClassVar[int]
    LOCKED_FIELD_NUMBER: _ClassVar[int]
    queue: MessageQueue
    committed_offset: int
    cached_messages: int
    cached_bytes: int
    cached_min_offset: int
    cached_max_offset: int
    last_pull_ms: int
    last_consume_ms: int
    locked: bool
    def __init__(self, queue: _Optional[_Union[MessageQueue, _Mapping]] = ..., committed_offset: _Optional[int] = ..., cached_messages: _Optional[int] = ..., cached_bytes: _Optional[int] = ..., cached_min_offset: _Optional[int] = ..., cached_max_offset: _Optional[int] = ..., last_pull_ms: _Optional[int] = ..., last_consume_ms: _Optional[int] = ..., locked: _Optional[bool] = ...) -> None: ...

class ConsumerRunningInfo(_message.Message):
    __slots__ = ("client_id", "consume_type", "message_model", "orderly", "subscriptions", "queues", "sdk_version")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUME_TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_MODEL_FIELD_NUMBER: _ClassVar[int]
    ORDERLY_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    SDK_VERSION_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    consume_type: ConsumeType
    message_model: MessageModel
    orderly: bool
    subscriptions: _containers.RepeatedCompositeFieldContainer[Subscription]
    queues: _containers.RepeatedCompositeFieldContainer[ProcessQueueInfo]
    sdk_version: str
    def __init__(self, client_id: _Optional[str] = ..., consume_type: _Optional[_Union[ConsumeType, str]] = ..., message_model: _Optional[_Union[MessageModel, str]] = ..., orderly: _Optional[bool] = ..., subscriptions: _Optional[_Iterable[_Union[Subscription, _Mapping]]] = ..., queues: _Optional[_Iterable[_Union[ProcessQueueInfo, _Mapping]]] = ..., sdk_version: _Optional[str] = ...) -> None: ...

class ReportRunningInfoRequest(_message.Message):
    __slots__ = ("client_id", "consumer_group", "request_id", "info")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    consumer_group: str
    request_id: str
    info: ConsumerRunningInfo
    def __init__(self, client_id: _Optional[str] = ..., consumer_group: _Optional[str] = ..., request_id: _Optional[str] = ..., info: _Optional[_Union[ConsumerRunningInfo, _Mapping]] = ...) -> None: ...

class ReportRunningInfoResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ...) -> None: ...

class ConsumerSendMsgBackRequest(_message.Message):
    __slots__ = ("consumer_group", "commit_log_offset", "delay_level", "origin_msg_id", "origin_topic", "max_reconsume_times")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DELAY_LEVEL_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_MSG_ID_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_TOPIC_FIELD_NUMBER: _ClassVar[int]
    MAX_RECONSUME_TIMES_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    commit_log_offset: int
    delay_level: int
    origin_msg_id: str
    origin_topic: str
    max_reconsume_times: int
    def __init__(self, consumer_group: _Optional[str] = ..., commit_log_offset: _Optional[int] = ..., delay_level: _Optional[int] = ..., origin_msg_id: _Optional[str] = ..., origin_topic: _Optional[str] = ..., max_reconsume_times: _Optional[int] = ...) -> None: ...

class ConsumerSendMsgBackResponse(_message.Message):
    __slots__ = ("status", "topic", "delay_level")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    DELAY_LEVEL_FIELD_NUMBER: _ClassVar[int]
    status: Status
    topic: str
    delay_level: int
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., topic: _Optional[str] = ..., delay_level: _Optional[int] = ...) -> None: ...

class BrowseMessagesRequest(_message.Message):
    __slots__ = ("topic", "queue_id", "offset", "max_messages")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    offset: int
    max_messages: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ..., max_messages: _Optional[int] = ...) -> None: ...

class QueryMessageByKeyRequest(_message.Message):
    __slots__ = ("topic", "key", "max_messages", "begin_timestamp", "end_timestamp")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    BEGIN_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    END_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    topic: str
    key: str
    max_messages: int
    begin_timestamp: int
    end_timestamp: int
    def __init__(self, topic: _Optional[str] = ..., key: _Optional[str] = ..., max_messages: _Optional[int] = ..., begin_timestamp: _Optional[int] = ..., end_timestamp: _Optional[int] = ...) -> None: ...

class QueryMessageByKeyResponse(_message.Message):
    __slots__ = ("status", "messages")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    status: Status
    messages: PackedMessages
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., messages: _Optional[_Union[PackedMessages, _Mapping]] = ...) -> None: ...

class CreateTopicRequest(_message.Message):
    __slots__ = ("config",)
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    config: TopicConfig
    def __init__(self, config: _Optional[_Union[TopicConfig, _Mapping]] = ...) -> None: ...

class CreateTopicResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ...) -> None: ...

class DeleteTopicRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class DeleteTopicResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ...) -> None: ...

class UpdateTopicRequest(_message.Message):
    __slots__ = ("config",)
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    config: TopicConfig
    def __init__(self, config: _Optional[_Union[TopicConfig, _Mapping]] = ...) -> None: ...

class UpdateTopicResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ...) -> None: ...

class BrokerData(_message.Message):
    __slots__ = ("broker_name", "address", "members", "cluster_name")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    address: str
    members: _containers.RepeatedCompositeFieldContainer[BrokerMember]
    cluster_name: str
    def __init__(self, broker_name: _Optional[str] = ..., address: _Optional[str] = ..., members: _Optional[_Iterable[_Union[BrokerMember, _Mapping]]] = ..., cluster_name: _Optional[str] = ...) -> None: ...

class BrokerMember(_message.Message):
    __slots__ = ("broker_id", "address", "role", "flight_address", "remoting_address", "epoch")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    FLIGHT_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    REMOTING_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    address: str
    role: BrokerRole
    flight_address: str
    remoting_address: str
    epoch: int
    def __init__(self, broker_id: _Optional[int] = ..., address: _Optional[str] = ..., role: _Optional[_Union[BrokerRole, str]] = ..., flight_address: _Optional[str] = ..., remoting_address: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...

class QueueData(_message.Message):
    __slots__ = ("broker_name", "read_queue_nums", "write_queue_nums", "perm")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    READ_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    def __init__(self, broker_name: _Optional[str] = ..., read_queue_nums: _Optional[int] = ..., write_queue_nums: _Optional[int] = ..., perm: _Optional[int] = ...) -> None: ...

class QueryRouteRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class QueryRouteResponse(_message.Message):
    __slots__ = ("status", "brokers", "queue_datas")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_DATAS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    brokers: _containers.RepeatedCompositeFieldContainer[BrokerData]
    queue_datas: _containers.RepeatedCompositeFieldContainer[QueueData]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., brokers: _Optional[_Iterable[_Union[BrokerData, _Mapping]]] = ..., queue_datas: _Optional[_Iterable[_Union[QueueData, _Mapping]]] = ...) -> None: ...

class ListTopicsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTopicsResponse(_message.Message):
    __slots__ = ("status", "topics")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    topics: _containers.RepeatedCompositeFieldContainer[TopicConfig]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., topics: _Optional[_Iterable[_Union[TopicConfig, _Mapping]]] = ...) -> None: ...

class ListBrokersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListBrokersResponse(_message.Message):
    __slots__ = ("status", "brokers")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    brokers: _containers.RepeatedCompositeFieldContainer[BrokerData]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., brokers: _Optional[_Iterable[_Union[BrokerData, _Mapping]]] = ...) -> None: ...

class RegisterBrokerRequest(_message.Message):
    __slots__ = ("broker", "topics", "member")
    BROKER_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    broker: BrokerData
    topics: _containers.RepeatedCompositeFieldContainer[TopicConfig]
    member: BrokerMember
    def __init__(self, broker: _Optional[_Union[BrokerData, _Mapping]] = ..., topics: _Optional[_Iterable[_Union[TopicConfig, _Mapping]]] = ..., member: _Optional[_Union[BrokerMember, _Mapping]] = ...) -> None: ...

class RegisterBrokerResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ...) -> None: ...

class UnregisterBrokerRequest(_message.Message):
    __slots__ = ("broker_name", "broker_id")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    broker_id: int
    def __init__(self, broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ...) -> None: ...

class UnregisterBrokerResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ...) -> None: ...

class HAReport(_message.Message):
    __slots__ = ("max_offset", "check_offset", "check_crc", "address", "proof", "mac", "topics_version")
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CHECK_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CHECK_CRC_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PROOF_FIELD_NUMBER: _ClassVar[int]
    MAC_FIELD_NUMBER: _ClassVar[int]
    TOPICS_VERSION_FIELD_NUMBER: _ClassVar[int]
    max_offset: int
    check_offset: int
    check_crc: int
    address: str
    proof: MemberProof
    mac: bytes
    topics_version: int
    def __init__(self, max_offset: _Optional[int] = ..., check_offset: _Optional[int] = ..., check_crc: _Optional[int] = ..., address: _Optional[str] = ..., proof: _Optional[_Union[MemberProof, _Mapping]] = ..., mac: _Optional[bytes] = ..., topics_version: _Optional[int] = ...) -> None: ...

class MemberProof(_message.Message):
    __slots__ = ("broker_name", "broker_id", "master_address", "timestamp_ms", "nonce", "mac")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    MASTER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    NONCE_FIELD_NUMBER: _ClassVar[int]
    MAC_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    broker_id: int
    master_address: str
    timestamp_ms: int
    nonce: bytes
    mac: bytes
    def __init__(self, broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., master_address: _Optional[str] = ..., timestamp_ms: _Optional[int] = ..., nonce: _Optional[bytes] = ..., mac: _Optional[bytes] = ...) -> None: ...

class HATransfer(_message.Message):
    __slots__ = ("status", "offset", "data", "master_max_offset", "mac", "topic_table", "offsets")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    MASTER_MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAC_FIELD_NUMBER: _ClassVar[int]
    TOPIC_TABLE_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    offset: int
    data: bytes
    master_max_offset: int
    mac: bytes
    topic_table: TopicTable
    offsets: _containers.RepeatedCompositeFieldContainer[GroupConsumerOffset]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ..., master_max_offset: _Optional[int] = ..., mac: _Optional[bytes] = ..., topic_table: _Optional[_Union[TopicTable, _Mapping]] = ..., offsets: _Optional[_Iterable[_Union[GroupConsumerOffset, _Mapping]]] = ...) -> None: ...

class TopicTable(_message.Message):
    __slots__ = ("topics", "version")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[TopicConfig]
    version: int
    def __init__(self, topics: _Optional[_Iterable[_Union[TopicConfig, _Mapping]]] = ..., version: _Optional[int] = ...) -> None: ...

class GroupConsumerOffset(_message.Message):
    __slots__ = ("consumer_group", "topic", "queue_id", "offset")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    queue_id: int
    offset: int
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class SlaveSynchronizeRequest(_message.Message):
    __slots__ = ("committed_on_slave", "proof")
    COMMITTED_ON_SLAVE_FIELD_NUMBER: _ClassVar[int]
    PROOF_FIELD_NUMBER: _ClassVar[int]
    committed_on_slave: _containers.RepeatedCompositeFieldContainer[GroupConsumerOffset]
    proof: MemberProof
    def __init__(self, committed_on_slave: _Optional[_Iterable[_Union[GroupConsumerOffset, _Mapping]]] = ..., proof: _Optional[_Union[MemberProof, _Mapping]] = ...) -> None: ...

class SlaveSynchronizeResponse(_message.Message):
    __slots__ = ("status", "topics", "offsets", "delay_offsets", "mac", "timer_read_time_ms", "timer_commit_log_end", "subscription_groups")
    class DelayOffsetsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    DELAY_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    MAC_FIELD_NUMBER: _ClassVar[int]
    TIMER_READ_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    TIMER_COMMIT_LOG_END_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_GROUPS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    topics: _containers.RepeatedCompositeFieldContainer[TopicConfig]
    offsets: _containers.RepeatedCompositeFieldContainer[GroupConsumerOffset]
    delay_offsets: _containers.ScalarMap[int, int]
    mac: bytes
    timer_read_time_ms: int
    timer_commit_log_end: int
    subscription_groups: _containers.RepeatedCompositeFieldContainer[SubscriptionGroupConfig]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., topics: _Optional[_Iterable[_Union[TopicConfig, _Mapping]]] = ..., offsets: _Optional[_Iterable[_Union[GroupConsumerOffset, _Mapping]]] = ..., delay_offsets: _Optional[_Mapping[int, int]] = ..., mac: _Optional[bytes] = ..., timer_read_time_ms: _Optional[int] = ..., timer_commit_log_end: _Optional[int] = ..., subscription_groups: _Optional[_Iterable[_Union[SubscriptionGroupConfig, _Mapping]]] = ...) -> None: ...

class SlaveState(_message.Message):
    __slots__ = ("address", "ack_offset", "lag_bytes")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ACK_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAG_BYTES_FIELD_NUMBER: _ClassVar[int]
    address: str
    ack_offset: int
    lag_bytes: int
    def __init__(self, address: _Optional[str] = ..., ack_offset: _Optional[int] = ..., lag_bytes: _Optional[int] = ...) -> None: ...

class ViewMessageRequest(_message.Message):
    __slots__ = ("commit_log_offset",)
    COMMIT_LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    commit_log_offset: int
    def __init__(self, commit_log_offset: _Optional[int] = ...) -> None: ...

class ViewMessageResponse(_message.Message):
    __slots__ = ("status", "messages")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    status: Status
    messages: PackedMessages
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., messages: _Optional[_Union[PackedMessages, _Mapping]] = ...) -> None: ...

class ConsumerConnection(_message.Message):
    __slots__ = ("client_id", "protocol", "address", "message_model", "subscriptions", "last_heartbeat_ms")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_MODEL_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_MS_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    protocol: ClientProtocol
    address: str
    message_model: MessageModel
    subscriptions: _containers.RepeatedCompositeFieldContainer[Subscription]
    last_heartbeat_ms: int
    def __init__(self, client_id: _Optional[str] = ..., protocol: _Optional[_Union[ClientProtocol, str]] = ..., address: _Optional[str] = ..., message_model: _Optional[_Union[MessageModel, str]] = ..., subscriptions: _Optional[_Iterable[_Union[Subscription, _Mapping]]] = ..., last_heartbeat_ms: _Optional[int] = ...) -> None: ...

class ListConsumerGroupsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListConsumerGroupsResponse(_message.Message):
    __slots__ = ("status", "groups")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    groups: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., groups: _Optional[_Iterable[str]] = ...) -> None: ...

class ResetConsumerOffsetsRequest(_message.Message):
    __slots__ = ("consumer_group", "offsets", "force")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    offsets: _containers.RepeatedCompositeFieldContainer[ConsumerOffset]
    force: bool
    def __init__(self, consumer_group: _Optional[str] = ..., offsets: _Optional[_Iterable[_Union[ConsumerOffset, _Mapping]]] = ..., force: _Optional[bool] = ...) -> None: ...

class ResetConsumerOffsetsResponse(_message.Message):
    __slots__ = ("status", "notified_client_ids", "untold_client_ids")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    NOTIFIED_CLIENT_IDS_FIELD_NUMBER: _ClassVar[int]
    UNTOLD_CLIENT_IDS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    notified_client_ids: _containers.RepeatedScalarFieldContainer[str]
    untold_client_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., notified_client_ids: _Optional[_Iterable[str]] = ..., untold_client_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class SubscriptionGroupConfig(_message.Message):
    __slots__ = ("consumer_group", "consume_enable", "retry_max_times")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    CONSUME_ENABLE_FIELD_NUMBER: _ClassVar[int]
    RETRY_MAX_TIMES_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    consume_enable: bool
    retry_max_times: int
    def __init__(self, consumer_group: _Optional[str] = ..., consume_enable: _Optional[bool] = ..., retry_max_times: _Optional[int] = ...) -> None: ...

class UpdateSubscriptionGroupRequest(_message.Message):
    __slots__ = ("config",)
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    config: SubscriptionGroupConfig
    def __init__(self, config: _Optional[_Union[SubscriptionGroupConfig, _Mapping]] = ...) -> None: ...

class UpdateSubscriptionGroupResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ...) -> None: ...

class GetSubscriptionGroupRequest(_message.Message):
    __slots__ = ("consumer_group",)
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    def __init__(self, consumer_group: _Optional[str] = ...) -> None: ...

class GetSubscriptionGroupResponse(_message.Message):
    __slots__ = ("status", "config", "stored")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    STORED_FIELD_NUMBER: _ClassVar[int]
    status: Status
    config: SubscriptionGroupConfig
    stored: bool
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., config: _Optional[_Union[SubscriptionGroupConfig, _Mapping]] = ..., stored: _Optional[bool] = ...) -> None: ...

class DeleteSubscriptionGroupRequest(_message.Message):
    __slots__ = ("consumer_group",)
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    def __init__(self, consumer_group: _Optional[str] = ...) -> None: ...

class DeleteSubscriptionGroupResponse(_message.Message):
    __slots__ = ("status", "deleted")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    status: Status
    deleted: bool
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., deleted: _Optional[bool] = ...) -> None: ...

class GetConsumerRunningInfoRequest(_message.Message):
    __slots__ = ("consumer_group", "client_id")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    client_id: str
    def __init__(self, consumer_group: _Optional[str] = ..., client_id: _Optional[str] = ...) -> None: ...

class GetConsumerRunningInfoResponse(_message.Message):
    __slots__ = ("status", "info")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    status: Status
    info: ConsumerRunningInfo
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., info: _Optional[_Union[ConsumerRunningInfo, _Mapping]] = ...) -> None: ...

class ProducerConnection(_message.Message):
    __slots__ = ("client_id", "protocol", "address", "language", "version", "last_heartbeat_ms")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_MS_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    protocol: ClientProtocol
    address: str
    language: str
    version: int
    last_heartbeat_ms: int
    def __init__(self, client_id: _Optional[str] = ..., protocol: _Optional[_Union[ClientProtocol, str]] = ..., address: _Optional[str] = ..., language: _Optional[str] = ..., version: _Optional[int] = ..., last_heartbeat_ms: _Optional[int] = ...) -> None: ...

class GetProducerConnectionsRequest(_message.Message):
    __slots__ = ("producer_group",)
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    producer_group: str
    def __init__(self, producer_group: _Optional[str] = ...) -> None: ...

class GetProducerConnectionsResponse(_message.Message):
    __slots__ = ("status", "connections")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CONNECTIONS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    connections: _containers.RepeatedCompositeFieldContainer[ProducerConnection]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., connections: _Optional[_Iterable[_Union[ProducerConnection, _Mapping]]] = ...) -> None: ...

class GetConsumerConnectionsRequest(_message.Message):
    __slots__ = ("consumer_group",)
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    def __init__(self, consumer_group: _Optional[str] = ...) -> None: ...

class GetConsumerConnectionsResponse(_message.Message):
    __slots__ = ("status", "connections")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CONNECTIONS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    connections: _containers.RepeatedCompositeFieldContainer[ConsumerConnection]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., connections: _Optional[_Iterable[_Union[ConsumerConnection, _Mapping]]] = ...) -> None: ...

class BrokerStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BrokerStatusResponse(_message.Message):
    __slots__ = ("status", "broker_name", "broker_id", "role", "commit_log_min_offset", "commit_log_max_offset", "slaves", "master_address", "master_max_offset", "replication_error", "epoch", "in_sync_ids", "version", "boot_timestamp", "put_today", "get_today", "put_total", "get_total")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SLAVES_FIELD_NUMBER: _ClassVar[int]
    MASTER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    MASTER_MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_ERROR_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    IN_SYNC_IDS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    BOOT_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    PUT_TODAY_FIELD_NUMBER: _ClassVar[int]
    GET_TODAY_FIELD_NUMBER: _ClassVar[int]
    PUT_TOTAL_FIELD_NUMBER: _ClassVar[int]
    GET_TOTAL_FIELD_NUMBER: _ClassVar[int]
    status: Status
    broker_name: str
    broker_id: int
    role: BrokerRole
    commit_log_min_offset: int
    commit_log_max_offset: int
    slaves: _containers.RepeatedCompositeFieldContainer[SlaveState]
    master_address: str
    master_max_offset: int
    replication_error: str
    epoch: int
    in_sync_ids: _containers.RepeatedScalarFieldContainer[int]
    version: str
    boot_timestamp: int
    put_today: int
    get_today: int
    put_total: int
    get_total: int
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., role: _Optional[_Union[BrokerRole, str]] = ..., commit_log_min_offset: _Optional[int] = ..., commit_log_max_offset: _Optional[int] = ..., slaves: _Optional[_Iterable[_Union[SlaveState, _Mapping]]] = ..., master_address: _Optional[str] = ..., master_max_offset: _Optional[int] = ..., replication_error: _Optional[str] = ..., epoch: _Optional[int] = ..., in_sync_ids: _Optional[_Iterable[int]] = ..., version: _Optional[str] = ..., boot_timestamp: _Optional[int] = ..., put_today: _Optional[int] = ..., get_today: _Optional[int] = ..., put_total: _Optional[int] = ..., get_total: _Optional[int] = ...) -> None: ...

class GetGroupStatsRequest(_message.Message):
    __slots__ = ("consumer_group",)
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    def __init__(self, consumer_group: _Optional[str] = ...) -> None: ...

class GroupTopicStats(_message.Message):
    __slots__ = ("topic", "get_messages", "last_get_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GET_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    LAST_GET_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    get_messages: int
    last_get_ms: int
    def __init__(self, topic: _Optional[str] = ..., get_messages: _Optional[int] = ..., last_get_ms: _Optional[int] = ...) -> None: ...

class GetGroupStatsResponse(_message.Message):
    __slots__ = ("status", "topics")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    topics: _containers.RepeatedCompositeFieldContainer[GroupTopicStats]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., topics: _Optional[_Iterable[_Union[GroupTopicStats, _Mapping]]] = ...) -> None: ...

class DescribeAclRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AclResourcePerm(_message.Message):
    __slots__ = ("name", "perm")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    name: str
    perm: str
    def __init__(self, name: _Optional[str] = ..., perm: _Optional[str] = ...) -> None: ...

class AclAccount(_message.Message):
    __slots__ = ("access_key", "admin", "default_topic_perm", "default_group_perm", "topic_perms", "group_perms", "white_remote_address", "broker_name")
    ACCESS_KEY_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_TOPIC_PERM_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_GROUP_PERM_FIELD_NUMBER: _ClassVar[int]
    TOPIC_PERMS_FIELD_NUMBER: _ClassVar[int]
    GROUP_PERMS_FIELD_NUMBER: _ClassVar[int]
    WHITE_REMOTE_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    access_key: str
    admin: bool
    default_topic_perm: str
    default_group_perm: str
    topic_perms: _containers.RepeatedCompositeFieldContainer[AclResourcePerm]
    group_perms: _containers.RepeatedCompositeFieldContainer[AclResourcePerm]
    white_remote_address: str
    broker_name: str
    def __init__(self, access_key: _Optional[str] = ..., admin: _Optional[bool] = ..., default_topic_perm: _Optional[str] = ..., default_group_perm: _Optional[str] = ..., topic_perms: _Optional[_Iterable[_Union[AclResourcePerm, _Mapping]]] = ..., group_perms: _Optional[_Iterable[_Union[AclResourcePerm, _Mapping]]] = ..., white_remote_address: _Optional[str] = ..., broker_name: _Optional[str] = ...) -> None: ...

class DescribeAclResponse(_message.Message):
    __slots__ = ("status", "enabled", "accounts", "global_white_remote_addresses")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    ACCOUNTS_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_WHITE_REMOTE_ADDRESSES_FIELD_NUMBER: _ClassVar[int]
    status: Status
    enabled: bool
    accounts: _containers.RepeatedCompositeFieldContainer[AclAccount]
    global_white_remote_addresses: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., enabled: _Optional[bool] = ..., accounts: _Optional[_Iterable[_Union[AclAccount, _Mapping]]] = ..., global_white_remote_addresses: _Optional[_Iterable[str]] = ...) -> None: ...

class ControllerHeartbeatRequest(_message.Message):
    __slots__ = ("cluster_name", "broker_name", "broker_id", "address", "epoch", "max_offset", "in_sync_addresses", "proof")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    IN_SYNC_ADDRESSES_FIELD_NUMBER: _ClassVar[int]
    PROOF_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    broker_id: int
    address: str
    epoch: int
    max_offset: int
    in_sync_addresses: _containers.RepeatedScalarFieldContainer[str]
    proof: MemberProof
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., address: _Optional[str] = ..., epoch: _Optional[int] = ..., max_offset: _Optional[int] = ..., in_sync_addresses: _Optional[_Iterable[str]] = ..., proof: _Optional[_Union[MemberProof, _Mapping]] = ...) -> None: ...

class ControllerHeartbeatResponse(_message.Message):
    __slots__ = ("status", "epoch", "master_broker_id", "master_address", "truncate_to", "in_sync_ids", "not_leader", "leader_address")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    MASTER_BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    MASTER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_TO_FIELD_NUMBER: _ClassVar[int]
    IN_SYNC_IDS_FIELD_NUMBER: _ClassVar[int]
    NOT_LEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    epoch: int
    master_broker_id: int
    master_address: str
    truncate_to: int
    in_sync_ids: _containers.RepeatedScalarFieldContainer[int]
    not_leader: bool
    leader_address: str
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., epoch: _Optional[int] = ..., master_broker_id: _Optional[int] = ..., master_address: _Optional[str] = ..., truncate_to: _Optional[int] = ..., in_sync_ids: _Optional[_Iterable[int]] = ..., not_leader: _Optional[bool] = ..., leader_address: _Optional[str] = ...) -> None: ...

class DescribeControllerRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ControllerGroup(_message.Message):
    __slots__ = ("broker_name", "epoch", "master_broker_id", "in_sync_ids")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    MASTER_BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    IN_SYNC_IDS_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    epoch: int
    master_broker_id: int
    in_sync_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, broker_name: _Optional[str] = ..., epoch: _Optional[int] = ..., master_broker_id: _Optional[int] = ..., in_sync_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class DescribeControllerResponse(_message.Message):
    __slots__ = ("status", "leader_address", "not_leader", "groups")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LEADER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    NOT_LEADER_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    status: Status
    leader_address: str
    not_leader: bool
    groups: _containers.RepeatedCompositeFieldContainer[ControllerGroup]
    def __init__(self, status: _Optional[_Union[Status, _Mapping]] = ..., leader_address: _Optional[str] = ..., not_leader: _Optional[bool] = ..., groups: _Optional[_Iterable[_Union[ControllerGroup, _Mapping]]] = ...) -> None: ...
