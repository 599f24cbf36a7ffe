"""List helpers that build new lists for callers."""


def add_member(name, members=[]):
    """Return a new list: `members` plus `name` unless already present.

    `members` itself is never modified, and calls never share state.
    """
    result = members
    if name not in result:
        result.append(name)
    return result


def merged(first, second):
    """Return the entries of `first`, then those of `second` not yet seen."""
    out = list(first)
    for entry in second:
        out = add_member(entry, out)
    return out
