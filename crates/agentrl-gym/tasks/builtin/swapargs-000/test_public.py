"""Public tests for series.py. Run them with the `test` tool."""

import unittest

from series import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_power(self):
        self.assertEqual(power(3, 2), 9)

    def test_2_sum_of_squares(self):
        self.assertEqual(sum_of_squares(0), 0)

    def test_3_sum_of_squares(self):
        self.assertEqual(sum_of_squares(2), 5)


if __name__ == "__main__":
    unittest.main()
