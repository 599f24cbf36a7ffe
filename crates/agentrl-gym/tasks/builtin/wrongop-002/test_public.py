"""Public tests for cart.py. Run them with the `test` tool."""

import unittest

from cart import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_basket_price(self):
        self.assertEqual(basket_price([10, 20], 0), 30.0)

    def test_2_basket_price(self):
        self.assertEqual(basket_price([], 50), 0.0)

    def test_3_basket_price(self):
        self.assertEqual(basket_price([100], 25), 75.0)


if __name__ == "__main__":
    unittest.main()
