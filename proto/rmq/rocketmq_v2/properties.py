"""How a RocketMQ 5 message's system properties live in a stored record (RocketMQ MessageConst
names, as Apache's proxy writes them): both protocols read the same records, so a message
sent through `apache.rocketmq.v2` is read by rmq.v1 pulls and the Spark source with its tags,
keys and user properties, and the other way round."""

from __future__ import annotations

from rmq import message_format as mf
from rmq import retry

PROPERTY_MESSAGE_GROUP = "__SHARDINGKEY"      # MessageConst.PROPERTY_SHARDING_KEY (FIFO group)
PROPERTY_TIMER_DELIVER_MS = mf.PROPERTY_TIMER_DELIVER_MS  # delivery time of a DELAY message, epoch ms
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"    # "true" on a transaction's half message
PROPERTY_TRANSACTION_ID = "__transactionId__"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_BORN_HOST = "__BORNHOST"             # the client's own born host string
PROPERTY_CHECK_IMMUNITY_TIME = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"

# Names the v2 mapping owns: never shown to a v2 consumer as user properties.
SYSTEM_PROPERTIES = frozenset({
    mf.PROPERTY_TAGS,
    mf.PROPERTY_KEYS,
    mf.PROPERTY_UNIQ_KEY,
    mf.PROPERTY_DELAY_TIME_LEVEL,
    mf.PROPERTY_REAL_TOPIC,
    mf.PROPERTY_REAL_QUEUE_ID,
    retry.PROPERTY_RETRY_TOPIC,
    retry.PROPERTY_ORIGIN_MESSAGE_ID,
    retry.PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_MESSAGE_GROUP,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_TRANSACTION_ID,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_BORN_HOST,
    PROPERTY_CHECK_IMMUNITY_TIME,
    PROPERTY_TRANSACTION_CHECK_TIMES,
})
