"""List helpers that build new lists for callers."""


def with_tag(tag, tags=[]):
    """Return a new list: `tags` plus `tag` unless already present.

    `tags` itself is never modified, and calls never share state.
    """
    result = tags
    if tag not in result:
        result.append(tag)
    return result


def merged(first, second):
    """Return the entries of `first`, then those of `second` not yet seen."""
    out = list(first)
    for entry in second:
        out = with_tag(entry, out)
    return out
