"""Public tests for parsing.py. Run them with the `test` tool."""

import unittest

from parsing import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_leading_token(self):
        self.assertEqual(leading_token('   '), '')

    def test_2_normalise(self):
        self.assertEqual(normalise('  a   b '), 'a b')

    def test_3_leading_token(self):
        self.assertEqual(leading_token('GET /index'), 'get')


if __name__ == "__main__":
    unittest.main()
