"""Long polling: pulls held until a message arrives (PullRequestHoldService) and the fair,
bounded table of what waiting callers may hold."""
