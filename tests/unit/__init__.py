"""The unit tier (see tests/tier_support.py)."""
