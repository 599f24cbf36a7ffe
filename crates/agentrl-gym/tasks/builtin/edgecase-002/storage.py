"""Percentages for the status page."""


def usage_percent(used, capacity):
    """Return `used` as a percentage of `capacity`, rounded to one decimal.

    A zero `capacity` gives 0.0 instead of failing.
    """
    ratio = used / capacity
    return round(ratio * 100, 1)


def describe(used, capacity):
    """Return a short label such as '25.0% (1/4)'."""
    return f"{usage_percent(used, capacity)}% ({used}/{capacity})"
