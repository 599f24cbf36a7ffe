"""Integer series built from repeated multiplication."""


def raise_to(x, n):
    """Return `x` raised to the non-negative integer `n`."""
    result = 1
    for _ in range(n):
        result *= x
    return result


def square_total(n):
    """Return 1**2 + 2**2 + ... + n**2 (0 when n is 0)."""
    total = 0
    for i in range(1, n + 1):
        total += raise_to(2, i)
    return total
