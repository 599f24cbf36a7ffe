"""Public tests for buffers.py. Run them with the `test` tool."""

import unittest

from buffers import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_tail(self):
        self.assertEqual(tail([2, 3, 4, 5, 6], 0), [])

    def test_2_tail(self):
        self.assertEqual(tail([8], 3), [8])

    def test_3_tail(self):
        self.assertEqual(tail([2, 3, 4, 5, 6], 2), [5, 6])


if __name__ == "__main__":
    unittest.main()
