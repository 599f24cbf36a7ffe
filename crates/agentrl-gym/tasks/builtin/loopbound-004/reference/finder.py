"""Character search helpers for the editor."""


def rindex_of(data, symbol):
    """Return the index of the last occurrence of `symbol` in `data`, or -1."""
    i = len(data) - 1
    while i >= 0:
        if data[i] == symbol:
            return i
        i -= 1
    return -1


def contains(data, symbol):
    """Return True when `symbol` occurs in `data`."""
    return rindex_of(data, symbol) != -1
