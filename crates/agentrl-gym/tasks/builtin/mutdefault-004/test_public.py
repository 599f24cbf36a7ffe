"""Public tests for routes.py. Run them with the `test` tool."""

import unittest

from routes import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_add_stop(self):
        self.assertEqual(add_stop(5), [5])

    def test_2_add_stop(self):
        self.assertEqual(add_stop(6), [6])

    def test_3_merged(self):
        self.assertEqual(merged([1, 2], [2, 3]), [1, 2, 3])


if __name__ == "__main__":
    unittest.main()
