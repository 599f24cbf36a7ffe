"""Public tests for feeds.py. Run them with the `test` tool."""

import unittest

from feeds import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_recent(self):
        self.assertEqual(recent([3, 4, 5, 6, 7], 0), [])

    def test_2_recent(self):
        self.assertEqual(recent([9], 3), [9])

    def test_3_recent(self):
        self.assertEqual(recent([3, 4, 5, 6, 7], 2), [6, 7])


if __name__ == "__main__":
    unittest.main()
