"""Small text utilities used by the command parser."""


def normalise(line):
    """Collapse runs of whitespace in `line` and strip both ends."""
    return " ".join(line.split())


def leading_token(line):
    """Return the first word of `line` in lower case.

    Blank text gives the empty string.
    """
    words = normalise(line).split(" ")
    if words == [""]:
        return ""
    first = words[0].lower()
