"""Public tests for temps.py. Run them with the `test` tool."""

import unittest

from temps import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_mean_temperature(self):
        self.assertEqual(mean_temperature([]), 0.0)

    def test_2_mean_temperature(self):
        self.assertEqual(mean_temperature([2, 4]), 3.0)

    def test_3_mean_temperature(self):
        self.assertEqual(mean_temperature([1, 6]), 3.5)


if __name__ == "__main__":
    unittest.main()
