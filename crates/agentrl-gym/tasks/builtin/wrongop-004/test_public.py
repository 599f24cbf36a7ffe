"""Public tests for pricing.py. Run them with the `test` tool."""

import unittest

from pricing import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_sale_total(self):
        self.assertEqual(sale_total([10, 20], 0), 30.0)

    def test_2_sale_total(self):
        self.assertEqual(sale_total([], 50), 0.0)

    def test_3_sale_total(self):
        self.assertEqual(sale_total([100], 40), 60.0)


if __name__ == "__main__":
    unittest.main()
