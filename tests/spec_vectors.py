"""Byte-exact test vectors from docs/internals/store.md (TV2, TV19, ...), shared by the tests of
the writer (store) and the reader (connector) of the same layout."""

# store-commitlog-consumequeue TV2: topic "T", body "hi", queueId 0, bornTimestamp 1,
# bornHost 127.0.0.1:1234, storeTimestamp 2, storeHost 127.0.0.1:10911, no properties.
TV2_RECORD = bytes.fromhex(
    "0000005edaa320a758932aac00000000"
    "00000000000000000000000000000000"
    "00000000000000000000000000000001"
    "7f000001000004d20000000000000002"
    "7f00000100002a9f0000000000000000"
    "0000000000000002686901540000"
)
