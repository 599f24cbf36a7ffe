"""Integer series built from repeated multiplication."""


def power(base, exponent):
    """Return `base` raised to the non-negative integer `exponent`."""
    result = 1
    for _ in range(exponent):
        result *= base
    return result


def sum_of_squares(n):
    """Return 1**2 + 2**2 + ... + n**2 (0 when n is 0)."""
    total = 0
    for i in range(1, n + 1):
        total += power(i, 2)
    return total
