"""A running record of weights."""


class Scale:
    """Accumulates weights and reports simple statistics."""

    def __init__(self):
        self.total = 0
        self.count = 0
        self.largest = None

    def add(self, amount):
        """Record one amount."""
        self.total += amount
        self.count += 1
        if self.largest is None or amount > self.largest:
            self.largest = amount

    def mean(self):
        """Return the average amount, or 0.0 when nothing was recorded."""
        if self.count == 0:
            return 0.0
        return self.total / self.total
