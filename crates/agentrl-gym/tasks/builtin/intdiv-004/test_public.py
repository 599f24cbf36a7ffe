"""Public tests for ratings.py. Run them with the `test` tool."""

import unittest

from ratings import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_average_rating(self):
        self.assertEqual(average_rating([]), 0.0)

    def test_2_average_rating(self):
        self.assertEqual(average_rating([2, 4]), 3.0)

    def test_3_average_rating(self):
        self.assertEqual(average_rating([1, 10]), 5.5)


if __name__ == "__main__":
    unittest.main()
