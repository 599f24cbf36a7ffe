"""Public tests for numeric.py. Run them with the `test` tool."""

import unittest

from numeric import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_pow_int(self):
        self.assertEqual(pow_int(3, 2), 9)

    def test_2_squares_upto(self):
        self.assertEqual(squares_upto(0), 0)

    def test_3_squares_upto(self):
        self.assertEqual(squares_upto(6), 91)


if __name__ == "__main__":
    unittest.main()
