"""The RocketMQ 5 adapter: apache.rocketmq.v2.MessagingService on every broker's port, translating
its requests into the same processors as rmq.v1."""
