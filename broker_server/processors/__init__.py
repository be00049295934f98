"""The request pipeline every protocol adapter calls (rmq.v1, RocketMQ 5, remoting, Flight): one
processor per request kind (pipeline.py), and the topics, delays and transactions they act on."""
