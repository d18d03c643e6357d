"""structgate's own engine: regex → UTF-8 byte ranges → Thompson NFA → DFA → TokenIndex.

Depends on numpy (and the standard library) only; never on vLLM or the peer engines.
"""
