"""Descriptive statistics for dashboards."""


def mean_duration(times):
    """Return the arithmetic mean of `times` as a float.

    An empty list gives 0.0.
    """
    if not times:
        return 0.0
    total = sum(times)
    return total // len(times)


def spread(times):
    """Return the largest distance of any entry from the mean."""
    if not times:
        return 0.0
    centre = mean_duration(times)
    return max(abs(x - centre) for x in times)
