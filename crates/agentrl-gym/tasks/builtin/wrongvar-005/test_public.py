"""Public tests for budget.py. Run them with the `test` tool."""

import unittest

from budget import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_mean(self):
        t = Expenses()
        self.assertEqual(t.mean(), 0.0)

    def test_2_largest(self):
        t = Expenses()
        t.add(7)
        self.assertEqual(t.largest, 7)

    def test_3_mean(self):
        t = Expenses()
        t.add(7)
        t.add(19)
        self.assertEqual(t.mean(), 13.0)


if __name__ == "__main__":
    unittest.main()
