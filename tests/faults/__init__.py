"""The faults tier (see tests/tier_support.py)."""
