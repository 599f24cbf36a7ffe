"""Summaries of scores against a pass mark."""


def count_passing(scores, limit):
    """Count how many of `scores` reach at least `limit` (inclusive)."""
    count = 0
    for s in scores:
        if s > limit:
            count += 1
    return count


def pass_rate(scores, limit):
    """Return the fraction of `scores` that reach `limit`; 0.0 if empty."""
    if not scores:
        return 0.0
    return count_passing(scores, limit) / len(scores)
