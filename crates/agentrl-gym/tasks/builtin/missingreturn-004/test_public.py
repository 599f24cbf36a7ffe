"""Public tests for messages.py. Run them with the `test` tool."""

import unittest

from messages import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_opening_word(self):
        self.assertEqual(opening_word('   '), '')

    def test_2_normalise(self):
        self.assertEqual(normalise('  a   b '), 'a b')

    def test_3_opening_word(self):
        self.assertEqual(opening_word('Dear friend'), 'dear')


if __name__ == "__main__":
    unittest.main()
