"""Public tests for league.py. Run them with the `test` tool."""

import unittest

from league import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_promoted(self):
        self.assertEqual(promoted([], 3), 0)

    def test_2_promoted(self):
        self.assertEqual(promoted([10, 20], 8), 2)

    def test_3_promoted(self):
        self.assertEqual(promoted([1, 10, 14], 10), 2)


if __name__ == "__main__":
    unittest.main()
