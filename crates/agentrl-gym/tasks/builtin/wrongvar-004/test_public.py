"""Public tests for weights.py. Run them with the `test` tool."""

import unittest

from weights import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_mean(self):
        t = Scale()
        self.assertEqual(t.mean(), 0.0)

    def test_2_largest(self):
        t = Scale()
        t.add(6)
        self.assertEqual(t.largest, 6)

    def test_3_mean(self):
        t = Scale()
        t.add(6)
        t.add(16)
        self.assertEqual(t.mean(), 11.0)


if __name__ == "__main__":
    unittest.main()
