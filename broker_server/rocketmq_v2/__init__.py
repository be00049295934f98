"""Apache RocketMQ 5's gRPC protocol (`apache.rocketmq.v2.MessagingService`) served beside
rmq.v1 on every broker's port, so the official RocketMQ 5 clients produce to and consume from
rmq (docs/manual/rocketmq-clients.md; spec rocketmq-v2-protocol.md). The service is assembled
by `service.build_service`; this package imports nothing itself, so that loading one of its
modules (the CLI loads `authentication` for its security flags) does not load the broker."""
