"""Public tests for orders.py. Run them with the `test` tool."""

import unittest

from orders import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_order_total(self):
        self.assertEqual(order_total([10, 20], 0), 30.0)

    def test_2_order_total(self):
        self.assertEqual(order_total([], 50), 0.0)

    def test_3_order_total(self):
        self.assertEqual(order_total([100], 30), 70.0)


if __name__ == "__main__":
    unittest.main()
