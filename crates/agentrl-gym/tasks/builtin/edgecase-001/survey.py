"""Percentages for the status page."""


def share(votes, cast):
    """Return `votes` as a percentage of `cast`, rounded to one decimal.

    A zero `cast` gives 0.0 instead of failing.
    """
    ratio = votes / cast
    return round(ratio * 100, 1)


def describe(votes, cast):
    """Return a short label such as '25.0% (1/4)'."""
    return f"{share(votes, cast)}% ({votes}/{cast})"
