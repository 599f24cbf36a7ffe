"""Integer series built from repeated multiplication."""


def ipow(b, e):
    """Return `b` raised to the non-negative integer `e`."""
    result = 1
    for _ in range(e):
        result *= b
    return result


def total_squares(n):
    """Return 1**2 + 2**2 + ... + n**2 (0 when n is 0)."""
    total = 0
    for i in range(1, n + 1):
        total += ipow(2, i)
    return total
