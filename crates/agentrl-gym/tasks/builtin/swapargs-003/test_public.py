"""Public tests for mathutil.py. Run them with the `test` tool."""

import unittest

from mathutil import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_ipow(self):
        self.assertEqual(ipow(3, 2), 9)

    def test_2_total_squares(self):
        self.assertEqual(total_squares(0), 0)

    def test_3_total_squares(self):
        self.assertEqual(total_squares(2), 5)


if __name__ == "__main__":
    unittest.main()
