"""The realmodel tier (see tests/tier_support.py)."""
