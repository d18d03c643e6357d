"""Schemas of the remainder-automaton tests (tests/test_native_residue_product.py,
tests/test_native_residue_masks.py)."""
from __future__ import annotations


def integer_schema(mo, negs, lo, hi) -> dict:
    """``{"type": "integer"}`` with ``multipleOf: mo`` (None: none), a ``not {multipleOf: m}`` per
    ``m`` of ``negs`` (under ``allOf``) and the inclusive bounds ``lo`` / ``hi`` (None: none)."""
    s: dict = {"type": "integer"}
    if mo is not None:
        s["multipleOf"] = mo
    if negs:
        s["allOf"] = [{"not": {"multipleOf": m}} for m in negs]
    if lo is not None:
        s["minimum"] = lo
    if hi is not None:
        s["maximum"] = hi
    return s
