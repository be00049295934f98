"""The name server (`rmq namesrv`): the route table brokers register in, and the broker's side
of the name server protocol (BrokerOuterAPI)."""
