"""Public tests for scorebook.py. Run them with the `test` tool."""

import unittest

from scorebook import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_mean(self):
        t = ScoreBook()
        self.assertEqual(t.mean(), 0.0)

    def test_2_largest(self):
        t = ScoreBook()
        t.add(4)
        self.assertEqual(t.largest, 4)

    def test_3_mean(self):
        t = ScoreBook()
        t.add(4)
        t.add(10)
        self.assertEqual(t.mean(), 7.0)


if __name__ == "__main__":
    unittest.main()
