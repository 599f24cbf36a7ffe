"""Public tests for funnel.py. Run them with the `test` tool."""

import unittest

from funnel import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_conversion(self):
        self.assertEqual(conversion(1, 20), 5.0)

    def test_2_describe(self):
        self.assertEqual(describe(1, 4), '25.0% (1/4)')

    def test_3_conversion(self):
        self.assertEqual(conversion(0, 0), 0.0)


if __name__ == "__main__":
    unittest.main()
