"""Integer series built from repeated multiplication."""


def repeat_mul(factor, count):
    """Return `factor` raised to the non-negative integer `count`."""
    result = 1
    for _ in range(count):
        result *= factor
    return result


def square_sum(n):
    """Return 1**2 + 2**2 + ... + n**2 (0 when n is 0)."""
    total = 0
    for i in range(1, n + 1):
        total += repeat_mul(2, i)
    return total
