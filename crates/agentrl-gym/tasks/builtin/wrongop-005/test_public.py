"""Public tests for shop.py. Run them with the `test` tool."""

import unittest

from shop import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_final_price(self):
        self.assertEqual(final_price([10, 20], 0), 30.0)

    def test_2_final_price(self):
        self.assertEqual(final_price([], 50), 0.0)

    def test_3_final_price(self):
        self.assertEqual(final_price([100], 50), 50.0)


if __name__ == "__main__":
    unittest.main()
