"""Public tests for titles.py. Run them with the `test` tool."""

import unittest

from titles import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_head_word(self):
        self.assertEqual(head_word('   '), '')

    def test_2_normalise(self):
        self.assertEqual(normalise('  a   b '), 'a b')

    def test_3_head_word(self):
        self.assertEqual(head_word('Alpha Beta'), 'alpha')


if __name__ == "__main__":
    unittest.main()
