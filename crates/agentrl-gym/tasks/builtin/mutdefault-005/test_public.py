"""Public tests for queue.py. Run them with the `test` tool."""

import unittest

from queue import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_enqueue(self):
        self.assertEqual(enqueue(6), [6])

    def test_2_enqueue(self):
        self.assertEqual(enqueue(7), [7])

    def test_3_merged(self):
        self.assertEqual(merged([1, 2], [2, 3]), [1, 2, 3])


if __name__ == "__main__":
    unittest.main()
