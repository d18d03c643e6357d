"""structgate's conformance kit, for built-in and third-party backends.

One line runs the whole interface contract and the language corpus against a registered backend::

    # tests/test_my_backend.py
    from structgate.testing import BackendConformance

    class TestMyBackend(BackendConformance):
        backend_name = "my-backend"          # the name your plugin registers

Optional class attributes: ``backend_options`` (dict passed to ``get_backend``), ``deviations``
(``{check or corpus id: reason}``: those checks are marked ``xfail(strict=True)`` with the reason —
document them; one that starts passing fails the run until it is removed), ``refusals``
(``{corpus id: reason}``: entries the backend refuses on purpose with ``UnsupportedFeatureError`` /
``CompileLimitError``; any other refusal fails), and an overridable ``make_vocabulary()`` (default: :func:`tiny_vocabulary`, a synthetic 337-token
byte-level vocabulary with padding and non-EOS specials).

Contents: :class:`BackendConformance` (pytest test class, in :mod:`structgate.testing.conformance`),
:data:`CORPUS` / :class:`CorpusEntry` (:mod:`structgate.testing.corpus`), :func:`tiny_vocabulary`
(:mod:`structgate.testing.vocab`). pytest is imported only when ``BackendConformance`` is used.
"""
from __future__ import annotations

from .corpus import CORPUS, CorpusEntry, corpus_by_id
from .vocab import tiny_vocabulary

__all__ = ["BackendConformance", "CORPUS", "CorpusEntry", "corpus_by_id", "tiny_vocabulary", "drive"]


def __getattr__(name):
    if name in ("BackendConformance", "drive"):
        from . import conformance

        return getattr(conformance, name)
    raise AttributeError(name)
