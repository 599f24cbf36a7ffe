"""Public tests for checkout.py. Run them with the `test` tool."""

import unittest

from checkout import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_discounted_total(self):
        self.assertEqual(discounted_total([10, 20], 0), 30.0)

    def test_2_discounted_total(self):
        self.assertEqual(discounted_total([], 50), 0.0)

    def test_3_discounted_total(self):
        self.assertEqual(discounted_total([100], 10), 90.0)


if __name__ == "__main__":
    unittest.main()
