"""Bridges to the stacks people already use (each module needs its optional extra)."""
