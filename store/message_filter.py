"""Tag filter on ConsumeQueue entries (RocketMQ ExpressionMessageFilter#isMatchedByConsumeQueue
for TAG subscriptions): an entry matches when its tagsCode is in the subscription's code set.
The client re-checks the tag string, since different tags can share a hash code."""

from __future__ import annotations

from collections.abc import Collection

import numpy as np


def match_tags(tags_codes: np.ndarray, tag_codes: Collection[int] | None) -> np.ndarray | None:
    """Boolean mask of matching entries, or None when everything matches."""
    if tag_codes is None:
        return None
    return np.isin(tags_codes, np.fromiter(tag_codes, dtype=np.int64, count=len(tag_codes)))
