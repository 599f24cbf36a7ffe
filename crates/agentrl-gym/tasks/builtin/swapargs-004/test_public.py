"""Public tests for sequences.py. Run them with the `test` tool."""

import unittest

from sequences import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_repeat_mul(self):
        self.assertEqual(repeat_mul(3, 2), 9)

    def test_2_square_sum(self):
        self.assertEqual(square_sum(0), 0)

    def test_3_square_sum(self):
        self.assertEqual(square_sum(5), 55)


if __name__ == "__main__":
    unittest.main()
