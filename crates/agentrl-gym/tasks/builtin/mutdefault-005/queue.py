"""List helpers that build new lists for callers."""


def enqueue(job, pending=[]):
    """Return a new list: `pending` plus `job` unless already present.

    `pending` itself is never modified, and calls never share state.
    """
    result = pending
    if job not in result:
        result.append(job)
    return result


def merged(first, second):
    """Return the entries of `first`, then those of `second` not yet seen."""
    out = list(first)
    for entry in second:
        out = enqueue(entry, out)
    return out
