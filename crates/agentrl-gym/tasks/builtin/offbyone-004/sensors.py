"""Helpers for keeping the most recent entries of a sequence."""


def take_last(readings, m):
    """Return the last `m` entries of `readings` as a list, oldest first.

    A non-positive `m` gives an empty list; asking for more entries than
    exist gives all of them.
    """
    if m <= 0:
        return []
    start = len(readings) - m - 1
    if start < 0:
        start = 0
    return list(readings[start:])


def count_recent(readings, m, target):
    """Count how often `target` occurs among the last `m` entries."""
    return take_last(readings, m).count(target)
