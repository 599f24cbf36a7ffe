"""Public tests for algebra.py. Run them with the `test` tool."""

import unittest

from algebra import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_power_of(self):
        self.assertEqual(power_of(3, 2), 9)

    def test_2_sum_squares(self):
        self.assertEqual(sum_squares(0), 0)

    def test_3_sum_squares(self):
        self.assertEqual(sum_squares(6), 91)


if __name__ == "__main__":
    unittest.main()
