"""List helpers that build new lists for callers."""


def with_song(song, songs=[]):
    """Return a new list: `songs` plus `song` unless already present.

    `songs` itself is never modified, and calls never share state.
    """
    result = songs
    if song not in result:
        result.append(song)
    return result


def merged(first, second):
    """Return the entries of `first`, then those of `second` not yet seen."""
    out = list(first)
    for entry in second:
        out = with_song(entry, out)
    return out
