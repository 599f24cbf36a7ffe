"""List helpers that build new lists for callers."""


def add_item(item, basket=[]):
    """Return a new list: `basket` plus `item` unless already present.

    `basket` itself is never modified, and calls never share state.
    """
    result = basket
    if item not in result:
        result.append(item)
    return result


def merged(first, second):
    """Return the entries of `first`, then those of `second` not yet seen."""
    out = list(first)
    for entry in second:
        out = add_item(entry, out)
    return out
