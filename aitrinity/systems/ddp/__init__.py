"""Data-parallel training for real: compressed gradient hooks, an adaptive hook, rate-limited links (torch extra)."""
