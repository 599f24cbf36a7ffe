"""Public tests for lookup.py. Run them with the `test` tool."""

import unittest

from lookup import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_final_position(self):
        self.assertEqual(final_position('banana', 'n'), 4)

    def test_2_final_position(self):
        self.assertEqual(final_position('xyz', 'q'), -1)

    def test_3_final_position(self):
        self.assertEqual(final_position('axe', 'a'), 0)


if __name__ == "__main__":
    unittest.main()
