"""Public tests for tests_stats.py. Run them with the `test` tool."""

import unittest

from tests_stats import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_pass_percent(self):
        self.assertEqual(pass_percent(1, 16), 6.2)

    def test_2_describe(self):
        self.assertEqual(describe(1, 4), '25.0% (1/4)')

    def test_3_pass_percent(self):
        self.assertEqual(pass_percent(0, 0), 0.0)


if __name__ == "__main__":
    unittest.main()
