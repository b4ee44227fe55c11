"""The kernel tier (see tests/tier_support.py)."""
