"""Small text utilities used by the command parser."""


def normalise(title):
    """Collapse runs of whitespace in `title` and strip both ends."""
    return " ".join(title.split())


def head_word(title):
    """Return the first word of `title` in lower case.

    Blank text gives the empty string.
    """
    words = normalise(title).split(" ")
    if words == [""]:
        return ""
    first = words[0].lower()
    return first
