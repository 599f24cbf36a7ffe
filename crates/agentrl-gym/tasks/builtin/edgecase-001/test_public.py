"""Public tests for survey.py. Run them with the `test` tool."""

import unittest

from survey import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_share(self):
        self.assertEqual(share(1, 8), 12.5)

    def test_2_describe(self):
        self.assertEqual(describe(1, 4), '25.0% (1/4)')

    def test_3_share(self):
        self.assertEqual(share(0, 0), 0.0)


if __name__ == "__main__":
    unittest.main()
