"""Public tests for timing.py. Run them with the `test` tool."""

import unittest

from timing import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_mean(self):
        t = LapTimer()
        self.assertEqual(t.mean(), 0.0)

    def test_2_largest(self):
        t = LapTimer()
        t.add(5)
        self.assertEqual(t.largest, 5)

    def test_3_mean(self):
        t = LapTimer()
        t.add(5)
        t.add(13)
        self.assertEqual(t.mean(), 9.0)


if __name__ == "__main__":
    unittest.main()
