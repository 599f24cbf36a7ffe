"""List helpers that build new lists for callers."""


def add_stop(stop, route=[]):
    """Return a new list: `route` plus `stop` unless already present.

    `route` itself is never modified, and calls never share state.
    """
    result = route
    if stop not in result:
        result.append(stop)
    return result


def merged(first, second):
    """Return the entries of `first`, then those of `second` not yet seen."""
    out = list(first)
    for entry in second:
        out = add_stop(entry, out)
    return out
