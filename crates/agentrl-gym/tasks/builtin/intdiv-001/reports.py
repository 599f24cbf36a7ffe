"""Descriptive statistics for dashboards."""


def average_score(scores):
    """Return the arithmetic mean of `scores` as a float.

    An empty list gives 0.0.
    """
    if not scores:
        return 0.0
    total = sum(scores)
    return total // len(scores)


def spread(scores):
    """Return the largest distance of any entry from the mean."""
    if not scores:
        return 0.0
    centre = average_score(scores)
    return max(abs(x - centre) for x in scores)
