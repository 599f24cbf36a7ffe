"""Percentages for the status page."""


def conversion(buyers, visitors):
    """Return `buyers` as a percentage of `visitors`, rounded to one decimal.

    A zero `visitors` gives 0.0 instead of failing.
    """
    ratio = buyers / visitors
    return round(ratio * 100, 1)


def describe(buyers, visitors):
    """Return a short label such as '25.0% (1/4)'."""
    return f"{conversion(buyers, visitors)}% ({buyers}/{visitors})"
