"""Price calculations for the checkout page."""


def subtotal(prices):
    """Return the plain sum of `prices` as a float."""
    total = 0.0
    for price in prices:
        total += price
    return total


def discounted_total(prices, rate):
    """Return the total of `prices` after a percentage discount.

    `rate` is a percentage between 0 and 100. The result is rounded to
    two decimals.
    """
    base = subtotal(prices)
    discount = base * rate / 100
    return round(base - discount, 2)
