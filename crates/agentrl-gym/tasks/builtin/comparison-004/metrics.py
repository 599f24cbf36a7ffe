"""Summaries of scores against a pass mark."""


def above_target(samples, target):
    """Count how many of `samples` reach at least `target` (inclusive)."""
    count = 0
    for s in samples:
        if s > target:
            count += 1
    return count


def pass_rate(samples, target):
    """Return the fraction of `samples` that reach `target`; 0.0 if empty."""
    if not samples:
        return 0.0
    return above_target(samples, target) / len(samples)
