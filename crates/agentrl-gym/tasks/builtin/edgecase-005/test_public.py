"""Public tests for uptime.py. Run them with the `test` tool."""

import unittest

from uptime import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_availability(self):
        self.assertEqual(availability(1, 24), 4.2)

    def test_2_describe(self):
        self.assertEqual(describe(1, 4), '25.0% (1/4)')

    def test_3_availability(self):
        self.assertEqual(availability(0, 0), 0.0)


if __name__ == "__main__":
    unittest.main()
