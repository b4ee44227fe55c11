"""The browser tier (see tests/tier_support.py)."""
