"""Public tests for search.py. Run them with the `test` tool."""

import unittest

from search import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_last_index(self):
        self.assertEqual(last_index('banana', 'n'), 4)

    def test_2_last_index(self):
        self.assertEqual(last_index('xyz', 'q'), -1)

    def test_3_last_index(self):
        self.assertEqual(last_index('abc', 'a'), 0)


if __name__ == "__main__":
    unittest.main()
