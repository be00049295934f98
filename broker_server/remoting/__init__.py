"""The RocketMQ 4.x remoting adapter (docs/remoting-protocol.md): RemotingCommand frames over TCP,
served by the broker and the name server beside their gRPC ports, over the same processors."""
