"""Public tests for history.py. Run them with the `test` tool."""

import unittest

from history import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_last_n(self):
        self.assertEqual(last_n([1, 2, 3, 4, 5], 0), [])

    def test_2_last_n(self):
        self.assertEqual(last_n([7], 3), [7])

    def test_3_last_n(self):
        self.assertEqual(last_n([1, 2, 3, 4, 5], 2), [4, 5])


if __name__ == "__main__":
    unittest.main()
