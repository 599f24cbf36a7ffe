"""Public tests for cursor.py. Run them with the `test` tool."""

import unittest

from cursor import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_last_match(self):
        self.assertEqual(last_match('banana', 'n'), 4)

    def test_2_last_match(self):
        self.assertEqual(last_match('xyz', 'q'), -1)

    def test_3_last_match(self):
        self.assertEqual(last_match('aim', 'a'), 0)


if __name__ == "__main__":
    unittest.main()
