"""Public tests for quality.py. Run them with the `test` tool."""

import unittest

from quality import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_count_ok(self):
        self.assertEqual(count_ok([], 3), 0)

    def test_2_count_ok(self):
        self.assertEqual(count_ok([10, 20], 4), 2)

    def test_3_count_ok(self):
        self.assertEqual(count_ok([1, 6, 10], 6), 2)


if __name__ == "__main__":
    unittest.main()
