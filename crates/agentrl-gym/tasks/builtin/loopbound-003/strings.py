"""Character search helpers for the editor."""


def last_pos(s, c):
    """Return the index of the last occurrence of `c` in `s`, or -1."""
    i = len(s) - 1
    while i > 0:
        if s[i] == c:
            return i
        i -= 1
    return -1


def contains(s, c):
    """Return True when `c` occurs in `s`."""
    return last_pos(s, c) != -1
