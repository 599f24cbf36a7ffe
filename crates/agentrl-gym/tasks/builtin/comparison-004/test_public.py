"""Public tests for metrics.py. Run them with the `test` tool."""

import unittest

from metrics import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_above_target(self):
        self.assertEqual(above_target([], 3), 0)

    def test_2_above_target(self):
        self.assertEqual(above_target([10, 20], 7), 2)

    def test_3_above_target(self):
        self.assertEqual(above_target([1, 9, 13], 9), 2)


if __name__ == "__main__":
    unittest.main()
