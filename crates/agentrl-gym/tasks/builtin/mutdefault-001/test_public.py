"""Public tests for roster.py. Run them with the `test` tool."""

import unittest

from roster import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_add_member(self):
        self.assertEqual(add_member(2), [2])

    def test_2_add_member(self):
        self.assertEqual(add_member(3), [3])

    def test_3_merged(self):
        self.assertEqual(merged([1, 2], [2, 3]), [1, 2, 3])


if __name__ == "__main__":
    unittest.main()
