"""Price calculations for the checkout page."""


def subtotal(costs):
    """Return the plain sum of `costs` as a float."""
    total = 0.0
    for price in costs:
        total += price
    return total


def basket_price(costs, discount):
    """Return the total of `costs` after a percentage discount.

    `discount` is a percentage between 0 and 100. The result is rounded to
    two decimals.
    """
    base = subtotal(costs)
    discount = base * discount / 100
    return round(base - discount, 2)
