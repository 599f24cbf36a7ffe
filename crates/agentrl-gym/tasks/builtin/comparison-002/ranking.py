"""Summaries of scores against a pass mark."""


def qualified(points, cutoff):
    """Count how many of `points` reach at least `cutoff` (inclusive)."""
    count = 0
    for s in points:
        if s > cutoff:
            count += 1
    return count


def pass_rate(points, cutoff):
    """Return the fraction of `points` that reach `cutoff`; 0.0 if empty."""
    if not points:
        return 0.0
    return qualified(points, cutoff) / len(points)
