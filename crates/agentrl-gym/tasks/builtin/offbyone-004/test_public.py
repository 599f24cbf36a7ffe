"""Public tests for sensors.py. Run them with the `test` tool."""

import unittest

from sensors import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_take_last(self):
        self.assertEqual(take_last([5, 6, 7, 8, 9], 0), [])

    def test_2_take_last(self):
        self.assertEqual(take_last([11], 3), [11])

    def test_3_take_last(self):
        self.assertEqual(take_last([5, 6, 7, 8, 9], 2), [8, 9])


if __name__ == "__main__":
    unittest.main()
