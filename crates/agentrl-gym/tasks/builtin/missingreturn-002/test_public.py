"""Public tests for commands.py. Run them with the `test` tool."""

import unittest

from commands import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_command_name(self):
        self.assertEqual(command_name('   '), '')

    def test_2_normalise(self):
        self.assertEqual(normalise('  a   b '), 'a b')

    def test_3_command_name(self):
        self.assertEqual(command_name('Make Build'), 'make')


if __name__ == "__main__":
    unittest.main()
