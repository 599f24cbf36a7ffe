"""Price calculations for the checkout page."""


def subtotal(amounts):
    """Return the plain sum of `amounts` as a float."""
    total = 0.0
    for price in amounts:
        total += price
    return total


def invoice_total(amounts, percent):
    """Return the total of `amounts` after a percentage discount.

    `percent` is a percentage between 0 and 100. The result is rounded to
    two decimals.
    """
    base = subtotal(amounts)
    discount = base * percent / 100
    return round(base - discount, 2)
