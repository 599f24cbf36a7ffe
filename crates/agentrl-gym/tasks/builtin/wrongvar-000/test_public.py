"""Public tests for tally.py. Run them with the `test` tool."""

import unittest

from tally import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_mean(self):
        t = Tally()
        self.assertEqual(t.mean(), 0.0)

    def test_2_largest(self):
        t = Tally()
        t.add(2)
        self.assertEqual(t.largest, 2)

    def test_3_mean(self):
        t = Tally()
        t.add(2)
        t.add(4)
        self.assertEqual(t.mean(), 3.0)


if __name__ == "__main__":
    unittest.main()
