"""Helpers the test modules share: test modules import from here (and tests/conftest.py), never from each other."""
