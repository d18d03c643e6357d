"""The dense byte DFA every native component agrees on.

Layout (the contract between the regex compiler, the JSON-Schema compiler and the TokenIndex):

* states are ``0 .. n_states-1``; **state 0 is dead** (absorbing, non-accepting); **state 1 is the
  start state** (a DFA for the empty language has only states 0 and 1, with 1 non-accepting and
  every byte leading to 0);
* the alphabet is compressed into **byte equivalence classes**: ``byte_classes[b]`` is the class of
  byte ``b``; bytes in one class have identical transitions from every state (rust-lang/regex
  ``util/alphabet.rs``);
* ``table[s, c]`` is the next state from ``s`` on any byte of class ``c``;
* ``accepting[s]`` is True when the input read so far is a complete match;
* **every state other than 0 is live**: an accepting state is reachable from it. Builders prune
  dead states into 0, so "the token never reaches state 0" means "the output stays completable".

A state is *final* when it is accepting and every byte leads to 0 (``final_states``).

The pushdown engine (a stack of rule automata, ``docs/design.md``, "The native engine") keeps its own
lazy table; the TokenIndex of this eager path needs only ``table``, ``byte_classes`` and ``accepting``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["DFA", "DEAD", "START"]

DEAD = 0
START = 1


@dataclass(frozen=True, eq=False)
class DFA:
    """Dense DFA over bytes.

    Attributes
    ----------
    byte_classes : numpy.ndarray
        uint8, shape ``(256,)``: byte → class id in ``0 .. n_classes-1``.
    table : numpy.ndarray
        int32, shape ``(n_states, n_classes)``, C-contiguous; ``table[0, :] == 0``.
    accepting : numpy.ndarray
        bool, shape ``(n_states,)``; ``accepting[0] == False``.
    pattern : str
        The regex this DFA was built from (for messages); may be empty.
    """

    byte_classes: np.ndarray
    table: np.ndarray
    accepting: np.ndarray
    pattern: str = ""

    @property
    def n_states(self) -> int:
        return int(self.table.shape[0])

    @property
    def n_classes(self) -> int:
        return int(self.table.shape[1])

    def byte_table(self) -> np.ndarray:
        """int32 ``(n_states, 256)``: the table expanded to bytes (``table[:, byte_classes]``)."""
        return self.table[:, self.byte_classes]

    def step(self, state: int, data: bytes) -> int:
        """State after feeding ``data`` from ``state`` (0 once dead)."""
        t = self.table
        bc = self.byte_classes
        for b in data:
            state = int(t[state, bc[b]])
            if state == 0:
                return 0
        return state

    def matches(self, data: bytes) -> bool:
        """Full match of ``data`` from the start state."""
        return bool(self.accepting[self.step(START, data)])

    def final_states(self) -> np.ndarray:
        """bool ``(n_states,)``: accepting and every byte leads to the dead state."""
        return self.accepting & (self.table == 0).all(axis=1)

    @property
    def memory_size_bytes(self) -> int:
        return int(self.table.nbytes + self.accepting.nbytes + self.byte_classes.nbytes)
