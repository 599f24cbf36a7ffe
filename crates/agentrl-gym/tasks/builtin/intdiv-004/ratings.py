"""Descriptive statistics for dashboards."""


def average_rating(ratings):
    """Return the arithmetic mean of `ratings` as a float.

    An empty list gives 0.0.
    """
    if not ratings:
        return 0.0
    total = sum(ratings)
    return total // len(ratings)


def spread(ratings):
    """Return the largest distance of any entry from the mean."""
    if not ratings:
        return 0.0
    centre = average_rating(ratings)
    return max(abs(x - centre) for x in ratings)
