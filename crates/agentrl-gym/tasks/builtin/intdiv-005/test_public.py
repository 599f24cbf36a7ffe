"""Public tests for durations.py. Run them with the `test` tool."""

import unittest

from durations import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_mean_duration(self):
        self.assertEqual(mean_duration([]), 0.0)

    def test_2_mean_duration(self):
        self.assertEqual(mean_duration([2, 4]), 3.0)

    def test_3_mean_duration(self):
        self.assertEqual(mean_duration([1, 12]), 6.5)


if __name__ == "__main__":
    unittest.main()
