"""Helpers for keeping the most recent entries of a sequence."""


def recent(events, k):
    """Return the last `k` entries of `events` as a list, oldest first.

    A non-positive `k` gives an empty list; asking for more entries than
    exist gives all of them.
    """
    if k <= 0:
        return []
    start = len(events) - k - 1
    if start < 0:
        start = 0
    return list(events[start:])


def count_recent(events, k, target):
    """Count how often `target` occurs among the last `k` entries."""
    return recent(events, k).count(target)
