"""Character search helpers for the editor."""


def final_position(word, letter):
    """Return the index of the last occurrence of `letter` in `word`, or -1."""
    i = len(word) - 1
    while i > 0:
        if word[i] == letter:
            return i
        i -= 1
    return -1


def contains(word, letter):
    """Return True when `letter` occurs in `word`."""
    return final_position(word, letter) != -1
