"""Public tests for latency.py. Run them with the `test` tool."""

import unittest

from latency import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_mean_latency(self):
        self.assertEqual(mean_latency([]), 0.0)

    def test_2_mean_latency(self):
        self.assertEqual(mean_latency([2, 4]), 3.0)

    def test_3_mean_latency(self):
        self.assertEqual(mean_latency([1, 8]), 4.5)


if __name__ == "__main__":
    unittest.main()
