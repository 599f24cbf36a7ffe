"""Public tests for tags.py. Run them with the `test` tool."""

import unittest

from tags import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_with_tag(self):
        self.assertEqual(with_tag(1), [1])

    def test_2_with_tag(self):
        self.assertEqual(with_tag(2), [2])

    def test_3_merged(self):
        self.assertEqual(merged([1, 2], [2, 3]), [1, 2, 3])


if __name__ == "__main__":
    unittest.main()
