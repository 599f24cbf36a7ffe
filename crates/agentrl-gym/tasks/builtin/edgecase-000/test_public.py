"""Public tests for progress.py. Run them with the `test` tool."""

import unittest

from progress import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_percent_done(self):
        self.assertEqual(percent_done(1, 4), 25.0)

    def test_2_describe(self):
        self.assertEqual(describe(1, 4), '25.0% (1/4)')

    def test_3_percent_done(self):
        self.assertEqual(percent_done(0, 0), 0.0)


if __name__ == "__main__":
    unittest.main()
