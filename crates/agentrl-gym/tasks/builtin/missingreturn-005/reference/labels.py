"""Small text utilities used by the command parser."""


def normalise(label):
    """Collapse runs of whitespace in `label` and strip both ends."""
    return " ".join(label.split())


def label_key(label):
    """Return the first word of `label` in lower case.

    Blank text gives the empty string.
    """
    words = normalise(label).split(" ")
    if words == [""]:
        return ""
    first = words[0].lower()
    return first
