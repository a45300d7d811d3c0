"""User code recorded with ``Ledger.record_function`` in tests: replay imports it by path."""
