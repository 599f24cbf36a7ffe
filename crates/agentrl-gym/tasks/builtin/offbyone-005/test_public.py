"""Public tests for audit.py. Run them with the `test` tool."""

import unittest

from audit import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_final_entries(self):
        self.assertEqual(final_entries([6, 7, 8, 9, 10], 0), [])

    def test_2_final_entries(self):
        self.assertEqual(final_entries([12], 3), [12])

    def test_3_final_entries(self):
        self.assertEqual(final_entries([6, 7, 8, 9, 10], 2), [9, 10])


if __name__ == "__main__":
    unittest.main()
