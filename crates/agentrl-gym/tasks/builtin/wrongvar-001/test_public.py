"""Public tests for meter.py. Run them with the `test` tool."""

import unittest

from meter import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_mean(self):
        t = Meter()
        self.assertEqual(t.mean(), 0.0)

    def test_2_largest(self):
        t = Meter()
        t.add(3)
        self.assertEqual(t.largest, 3)

    def test_3_mean(self):
        t = Meter()
        t.add(3)
        t.add(7)
        self.assertEqual(t.mean(), 5.0)


if __name__ == "__main__":
    unittest.main()
