"""Checks that are Hypothesis properties: fuzzed comparisons against a reference (fuzzed) and
metamorphic laws of the eager step (metamorphic)."""
