"""Public tests for grading.py. Run them with the `test` tool."""

import unittest

from grading import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_count_passing(self):
        self.assertEqual(count_passing([], 3), 0)

    def test_2_count_passing(self):
        self.assertEqual(count_passing([10, 20], 3), 2)

    def test_3_count_passing(self):
        self.assertEqual(count_passing([1, 5, 9], 5), 2)


if __name__ == "__main__":
    unittest.main()
