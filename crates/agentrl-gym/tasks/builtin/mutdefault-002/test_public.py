"""Public tests for playlist.py. Run them with the `test` tool."""

import unittest

from playlist import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_with_song(self):
        self.assertEqual(with_song(3), [3])

    def test_2_with_song(self):
        self.assertEqual(with_song(4), [4])

    def test_3_merged(self):
        self.assertEqual(merged([1, 2], [2, 3]), [1, 2, 3])


if __name__ == "__main__":
    unittest.main()
