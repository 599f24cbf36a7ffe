"""Public tests for words.py. Run them with the `test` tool."""

import unittest

from words import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_first_word(self):
        self.assertEqual(first_word('   '), '')

    def test_2_normalise(self):
        self.assertEqual(normalise('  a   b '), 'a b')

    def test_3_first_word(self):
        self.assertEqual(first_word('Hello world'), 'hello')


if __name__ == "__main__":
    unittest.main()
