"""Percentages for the status page."""


def availability(up, checks):
    """Return `up` as a percentage of `checks`, rounded to one decimal.

    A zero `checks` gives 0.0 instead of failing.
    """
    ratio = up / checks
    return round(ratio * 100, 1)


def describe(up, checks):
    """Return a short label such as '25.0% (1/4)'."""
    return f"{availability(up, checks)}% ({up}/{checks})"
