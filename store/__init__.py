"""Storage engine: memory-mapped CommitLog, ConsumeQueues, IndexFile, flush, recovery, retention.
Knows nothing of gRPC or Spark (RocketMQ DefaultMessageStore and its parts)."""
