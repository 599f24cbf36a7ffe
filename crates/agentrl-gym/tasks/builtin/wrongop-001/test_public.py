"""Public tests for billing.py. Run them with the `test` tool."""

import unittest

from billing import *  # noqa: F401,F403


class TestPublic(unittest.TestCase):
    def test_1_invoice_total(self):
        self.assertEqual(invoice_total([10, 20], 0), 30.0)

    def test_2_invoice_total(self):
        self.assertEqual(invoice_total([], 50), 0.0)

    def test_3_invoice_total(self):
        self.assertEqual(invoice_total([100], 20), 80.0)


if __name__ == "__main__":
    unittest.main()
