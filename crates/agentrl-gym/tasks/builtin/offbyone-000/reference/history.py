"""Helpers for keeping the most recent entries of a sequence."""


def last_n(items, n):
    """Return the last `n` entries of `items` as a list, oldest first.

    A non-positive `n` gives an empty list; asking for more entries than
    exist gives all of them.
    """
    if n <= 0:
        return []
    start = len(items) - n
    if start < 0:
        start = 0
    return list(items[start:])


def count_recent(items, n, target):
    """Count how often `target` occurs among the last `n` entries."""
    return last_n(items, n).count(target)
