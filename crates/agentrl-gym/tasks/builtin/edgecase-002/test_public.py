"""Public tests for storage.py. Run them with the `test` tool."""

import unittest

from storage import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_usage_percent(self):
        self.assertEqual(usage_percent(1, 12), 8.3)

    def test_2_describe(self):
        self.assertEqual(describe(1, 4), '25.0% (1/4)')

    def test_3_usage_percent(self):
        self.assertEqual(usage_percent(0, 0), 0.0)


if __name__ == "__main__":
    unittest.main()
