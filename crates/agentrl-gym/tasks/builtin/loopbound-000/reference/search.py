"""Character search helpers for the editor."""


def last_index(text, ch):
    """Return the index of the last occurrence of `ch` in `text`, or -1."""
    i = len(text) - 1
    while i >= 0:
        if text[i] == ch:
            return i
        i -= 1
    return -1


def contains(text, ch):
    """Return True when `ch` occurs in `text`."""
    return last_index(text, ch) != -1
