"""Percentages for the status page."""


def pass_percent(passed, run):
    """Return `passed` as a percentage of `run`, rounded to one decimal.

    A zero `run` gives 0.0 instead of failing.
    """
    if run == 0:
        return 0.0
    ratio = passed / run
    return round(ratio * 100, 1)


def describe(passed, run):
    """Return a short label such as '25.0% (1/4)'."""
    return f"{pass_percent(passed, run)}% ({passed}/{run})"
