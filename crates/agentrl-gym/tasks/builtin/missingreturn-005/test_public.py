"""Public tests for labels.py. Run them with the `test` tool."""

import unittest

from labels import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_label_key(self):
        self.assertEqual(label_key('   '), '')

    def test_2_normalise(self):
        self.assertEqual(normalise('  a   b '), 'a b')

    def test_3_label_key(self):
        self.assertEqual(label_key('Key Value'), 'key')


if __name__ == "__main__":
    unittest.main()
