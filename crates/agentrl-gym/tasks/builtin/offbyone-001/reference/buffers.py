"""Helpers for keeping the most recent entries of a sequence."""


def tail(values, count):
    """Return the last `count` entries of `values` as a list, oldest first.

    A non-positive `count` gives an empty list; asking for more entries than
    exist gives all of them.
    """
    if count <= 0:
        return []
    start = len(values) - count
    if start < 0:
        start = 0
    return list(values[start:])


def count_recent(values, count, target):
    """Count how often `target` occurs among the last `count` entries."""
    return tail(values, count).count(target)
