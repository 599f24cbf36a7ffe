"""Small text utilities used by the command parser."""


def normalise(message):
    """Collapse runs of whitespace in `message` and strip both ends."""
    return " ".join(message.split())


def opening_word(message):
    """Return the first word of `message` in lower case.

    Blank text gives the empty string.
    """
    words = normalise(message).split(" ")
    if words == [""]:
        return ""
    first = words[0].lower()
