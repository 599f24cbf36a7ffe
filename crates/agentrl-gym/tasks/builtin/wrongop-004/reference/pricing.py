"""Price calculations for the checkout page."""


def subtotal(items):
    """Return the plain sum of `items` as a float."""
    total = 0.0
    for price in items:
        total += price
    return total


def sale_total(items, pct):
    """Return the total of `items` after a percentage discount.

    `pct` is a percentage between 0 and 100. The result is rounded to
    two decimals.
    """
    base = subtotal(items)
    discount = base * pct / 100
    return round(base - discount, 2)
