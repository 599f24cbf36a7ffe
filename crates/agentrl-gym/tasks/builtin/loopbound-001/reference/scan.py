"""Character search helpers for the editor."""


def rfind_char(line, char):
    """Return the index of the last occurrence of `char` in `line`, or -1."""
    i = len(line) - 1
    while i >= 0:
        if line[i] == char:
            return i
        i -= 1
    return -1


def contains(line, char):
    """Return True when `char` occurs in `line`."""
    return rfind_char(line, char) != -1
