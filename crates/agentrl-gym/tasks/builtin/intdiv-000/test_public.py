"""Public tests for averages.py. Run them with the `test` tool."""

import unittest

from averages import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_mean(self):
        self.assertEqual(mean([]), 0.0)

    def test_2_mean(self):
        self.assertEqual(mean([2, 4]), 3.0)

    def test_3_mean(self):
        self.assertEqual(mean([1, 2]), 1.5)


if __name__ == "__main__":
    unittest.main()
