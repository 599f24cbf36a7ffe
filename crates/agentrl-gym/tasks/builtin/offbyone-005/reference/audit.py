"""Helpers for keeping the most recent entries of a sequence."""


def final_entries(log, n):
    """Return the last `n` entries of `log` as a list, oldest first.

    A non-positive `n` gives an empty list; asking for more entries than
    exist gives all of them.
    """
    if n <= 0:
        return []
    start = len(log) - n
    if start < 0:
        start = 0
    return list(log[start:])


def count_recent(log, n, target):
    """Count how often `target` occurs among the last `n` entries."""
    return final_entries(log, n).count(target)
