"""Small text utilities used by the command parser."""


def normalise(text):
    """Collapse runs of whitespace in `text` and strip both ends."""
    return " ".join(text.split())


def first_word(text):
    """Return the first word of `text` in lower case.

    Blank text gives the empty string.
    """
    words = normalise(text).split(" ")
    if words == [""]:
        return ""
    first = words[0].lower()
    return first
