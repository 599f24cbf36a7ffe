"""Price calculations for the checkout page."""


def subtotal(lines):
    """Return the plain sum of `lines` as a float."""
    total = 0.0
    for price in lines:
        total += price
    return total


def order_total(lines, off):
    """Return the total of `lines` after a percentage discount.

    `off` is a percentage between 0 and 100. The result is rounded to
    two decimals.
    """
    base = subtotal(lines)
    discount = base * off / 100
    return round(base - discount, 2)
