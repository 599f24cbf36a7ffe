"""Price calculations for the checkout page."""


def subtotal(charges):
    """Return the plain sum of `charges` as a float."""
    total = 0.0
    for price in charges:
        total += price
    return total


def final_price(charges, reduction):
    """Return the total of `charges` after a percentage discount.

    `reduction` is a percentage between 0 and 100. The result is rounded to
    two decimals.
    """
    base = subtotal(charges)
    discount = base * reduction / 100
    return round(base + discount, 2)
