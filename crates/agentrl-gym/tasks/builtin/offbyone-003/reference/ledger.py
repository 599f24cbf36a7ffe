"""Helpers for keeping the most recent entries of a sequence."""


def newest(records, size):
    """Return the last `size` entries of `records` as a list, oldest first.

    A non-positive `size` gives an empty list; asking for more entries than
    exist gives all of them.
    """
    if size <= 0:
        return []
    start = len(records) - size
    if start < 0:
        start = 0
    return list(records[start:])


def count_recent(records, size, target):
    """Count how often `target` occurs among the last `size` entries."""
    return newest(records, size).count(target)
