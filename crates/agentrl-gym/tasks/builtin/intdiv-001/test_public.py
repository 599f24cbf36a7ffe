"""Public tests for reports.py. Run them with the `test` tool."""

import unittest

from reports import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_average_score(self):
        self.assertEqual(average_score([]), 0.0)

    def test_2_average_score(self):
        self.assertEqual(average_score([2, 4]), 3.0)

    def test_3_average_score(self):
        self.assertEqual(average_score([1, 4]), 2.5)


if __name__ == "__main__":
    unittest.main()
