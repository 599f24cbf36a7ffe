"""Summaries of scores against a pass mark."""


def num_passed(marks, pass_mark):
    """Count how many of `marks` reach at least `pass_mark` (inclusive)."""
    count = 0
    for s in marks:
        if s > pass_mark:
            count += 1
    return count


def pass_rate(marks, pass_mark):
    """Return the fraction of `marks` that reach `pass_mark`; 0.0 if empty."""
    if not marks:
        return 0.0
    return num_passed(marks, pass_mark) / len(marks)
