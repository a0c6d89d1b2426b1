"""Reusable rendering pieces for the pages (no compute, no model imports)."""
