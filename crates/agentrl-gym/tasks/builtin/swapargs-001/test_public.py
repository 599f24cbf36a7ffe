"""Public tests for geometry.py. Run them with the `test` tool."""

import unittest

from geometry import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_raise_to(self):
        self.assertEqual(raise_to(3, 2), 9)

    def test_2_square_total(self):
        self.assertEqual(square_total(0), 0)

    def test_3_square_total(self):
        self.assertEqual(square_total(5), 55)


if __name__ == "__main__":
    unittest.main()
