"""Character search helpers for the editor."""


def last_match(buf, target):
    """Return the index of the last occurrence of `target` in `buf`, or -1."""
    i = len(buf) - 1
    while i > 0:
        if buf[i] == target:
            return i
        i -= 1
    return -1


def contains(buf, target):
    """Return True when `target` occurs in `buf`."""
    return last_match(buf, target) != -1
