"""Descriptive statistics for dashboards."""


def mean(values):
    """Return the arithmetic mean of `values` as a float.

    An empty list gives 0.0.
    """
    if not values:
        return 0.0
    total = sum(values)
    return total // len(values)


def spread(values):
    """Return the largest distance of any entry from the mean."""
    if not values:
        return 0.0
    centre = mean(values)
    return max(abs(x - centre) for x in values)
