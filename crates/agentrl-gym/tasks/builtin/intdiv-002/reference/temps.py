"""Descriptive statistics for dashboards."""


def mean_temperature(readings):
    """Return the arithmetic mean of `readings` as a float.

    An empty list gives 0.0.
    """
    if not readings:
        return 0.0
    total = sum(readings)
    return total / len(readings)


def spread(readings):
    """Return the largest distance of any entry from the mean."""
    if not readings:
        return 0.0
    centre = mean_temperature(readings)
    return max(abs(x - centre) for x in readings)
