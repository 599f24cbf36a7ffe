"""Public tests for strings.py. Run them with the `test` tool."""

import unittest

from strings import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_last_pos(self):
        self.assertEqual(last_pos('banana', 'n'), 4)

    def test_2_last_pos(self):
        self.assertEqual(last_pos('xyz', 'q'), -1)

    def test_3_last_pos(self):
        self.assertEqual(last_pos('ant', 'a'), 0)


if __name__ == "__main__":
    unittest.main()
