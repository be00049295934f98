"""RocketMQ's 4.x remoting protocol as both sides speak it (docs/remoting-protocol.md): frames,
request and response codes, and rmq's own request signing over it."""
