"""Descriptive statistics for dashboards."""


def mean_latency(samples):
    """Return the arithmetic mean of `samples` as a float.

    An empty list gives 0.0.
    """
    if not samples:
        return 0.0
    total = sum(samples)
    return total / len(samples)


def spread(samples):
    """Return the largest distance of any entry from the mean."""
    if not samples:
        return 0.0
    centre = mean_latency(samples)
    return max(abs(x - centre) for x in samples)
