"""Integer series built from repeated multiplication."""


def power_of(number, degree):
    """Return `number` raised to the non-negative integer `degree`."""
    result = 1
    for _ in range(degree):
        result *= number
    return result


def sum_squares(n):
    """Return 1**2 + 2**2 + ... + n**2 (0 when n is 0)."""
    total = 0
    for i in range(1, n + 1):
        total += power_of(i, 2)
    return total
