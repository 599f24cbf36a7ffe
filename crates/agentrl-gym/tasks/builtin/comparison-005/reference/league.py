"""Summaries of scores against a pass mark."""


def promoted(results, minimum):
    """Count how many of `results` reach at least `minimum` (inclusive)."""
    count = 0
    for s in results:
        if s >= minimum:
            count += 1
    return count


def pass_rate(results, minimum):
    """Return the fraction of `results` that reach `minimum`; 0.0 if empty."""
    if not results:
        return 0.0
    return promoted(results, minimum) / len(results)
