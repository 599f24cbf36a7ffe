"""Public tests for exams.py. Run them with the `test` tool."""

import unittest

from exams import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_num_passed(self):
        self.assertEqual(num_passed([], 3), 0)

    def test_2_num_passed(self):
        self.assertEqual(num_passed([10, 20], 6), 2)

    def test_3_num_passed(self):
        self.assertEqual(num_passed([1, 8, 12], 8), 2)


if __name__ == "__main__":
    unittest.main()
