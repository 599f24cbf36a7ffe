"""Percentages for the status page."""


def percent_done(done, total):
    """Return `done` as a percentage of `total`, rounded to one decimal.

    A zero `total` gives 0.0 instead of failing.
    """
    if total == 0:
        return 0.0
    ratio = done / total
    return round(ratio * 100, 1)


def describe(done, total):
    """Return a short label such as '25.0% (1/4)'."""
    return f"{percent_done(done, total)}% ({done}/{total})"
