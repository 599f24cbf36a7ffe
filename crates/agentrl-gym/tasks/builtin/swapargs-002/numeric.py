"""Integer series built from repeated multiplication."""


def pow_int(value, times):
    """Return `value` raised to the non-negative integer `times`."""
    result = 1
    for _ in range(times):
        result *= value
    return result


def squares_upto(n):
    """Return 1**2 + 2**2 + ... + n**2 (0 when n is 0)."""
    total = 0
    for i in range(1, n + 1):
        total += pow_int(2, i)
    return total
