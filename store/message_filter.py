"""Message filters of a pull (RocketMQ MessageFilter). The tag filter on ConsumeQueue entries
(ExpressionMessageFilter#isMatchedByConsumeQueue for TAG subscriptions): an entry matches when its
tagsCode is in the subscription's code set; the client re-checks the tag string, since different tags
can share a hash code. A RecordFilter (isMatchedByCommitLog, e.g. SQL92 on properties) is given the
whole stored record; the store does not know what it evaluates."""

from __future__ import annotations

from collections.abc import Callable, Collection

import numpy as np

RecordFilter = Callable[[bytes], bool]


def match_tags(tags_codes: np.ndarray, tag_codes: Collection[int] | None) -> np.ndarray | None:
    """Boolean mask of matching entries, or None when everything matches."""
    if tag_codes is None:
        return None
    return np.isin(tags_codes, np.fromiter(tag_codes, dtype=np.int64, count=len(tag_codes)))
