"""Summaries of scores against a pass mark."""


def count_ok(measurements, threshold):
    """Count how many of `measurements` reach at least `threshold` (inclusive)."""
    count = 0
    for s in measurements:
        if s >= threshold:
            count += 1
    return count


def pass_rate(measurements, threshold):
    """Return the fraction of `measurements` that reach `threshold`; 0.0 if empty."""
    if not measurements:
        return 0.0
    return count_ok(measurements, threshold) / len(measurements)
