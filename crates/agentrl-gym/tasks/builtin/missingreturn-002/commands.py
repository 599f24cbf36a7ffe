"""Small text utilities used by the command parser."""


def normalise(command):
    """Collapse runs of whitespace in `command` and strip both ends."""
    return " ".join(command.split())


def command_name(command):
    """Return the first word of `command` in lower case.

    Blank text gives the empty string.
    """
    words = normalise(command).split(" ")
    if words == [""]:
        return ""
    first = words[0].lower()
