"""Public tests for scan.py. Run them with the `test` tool."""

import unittest

from scan import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_rfind_char(self):
        self.assertEqual(rfind_char('banana', 'n'), 4)

    def test_2_rfind_char(self):
        self.assertEqual(rfind_char('xyz', 'q'), -1)

    def test_3_rfind_char(self):
        self.assertEqual(rfind_char('apple', 'a'), 0)


if __name__ == "__main__":
    unittest.main()
