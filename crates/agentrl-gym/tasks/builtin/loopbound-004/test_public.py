"""Public tests for finder.py. Run them with the `test` tool."""

import unittest

from finder import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_rindex_of(self):
        self.assertEqual(rindex_of('banana', 'n'), 4)

    def test_2_rindex_of(self):
        self.assertEqual(rindex_of('xyz', 'q'), -1)

    def test_3_rindex_of(self):
        self.assertEqual(rindex_of('arc', 'a'), 0)


if __name__ == "__main__":
    unittest.main()
