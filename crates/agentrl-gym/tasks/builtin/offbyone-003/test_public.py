"""Public tests for ledger.py. Run them with the `test` tool."""

import unittest

from ledger import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_newest(self):
        self.assertEqual(newest([4, 5, 6, 7, 8], 0), [])

    def test_2_newest(self):
        self.assertEqual(newest([10], 3), [10])

    def test_3_newest(self):
        self.assertEqual(newest([4, 5, 6, 7, 8], 2), [7, 8])


if __name__ == "__main__":
    unittest.main()
