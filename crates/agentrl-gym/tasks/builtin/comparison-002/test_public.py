"""Public tests for ranking.py. Run them with the `test` tool."""

import unittest

from ranking import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_qualified(self):
        self.assertEqual(qualified([], 3), 0)

    def test_2_qualified(self):
        self.assertEqual(qualified([10, 20], 5), 2)

    def test_3_qualified(self):
        self.assertEqual(qualified([1, 7, 11], 7), 2)


if __name__ == "__main__":
    unittest.main()
