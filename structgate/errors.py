"""Every error structgate raises, in one module.

Two tiers (see docs/design/errors.md):

* compile / validation failures of a *constraint* raise a subclass of :class:`StructgateError`
  (they are also :class:`ValueError` where the input was the caller's fault, so frameworks that
  map ``ValueError`` to HTTP 400 do the right thing);
* on the hot path (``Matcher.advance``) a rejected token is **not** an exception: the call returns
  ``False`` and leaves the matcher state unchanged.

API misuse (wrong bitmask dtype/shape, rollback past history) raises :class:`BitmaskError` /
:class:`MatcherStateError` with the expected value in the message.
"""
from __future__ import annotations

__all__ = [
    "StructgateError",
    "GrammarSyntaxError",
    "UnsupportedFeatureError",
    "CompileLimitError",
    "IncompatibleVocabularyError",
    "BackendNotFoundError",
    "BackendUnavailableError",
    "BitmaskError",
    "MatcherStateError",
    "VocabularyError",
    "ConstraintKindError",
    "InvalidConstraintError",
    "nested_error",
    "rebuilt",
    "clip",
    "MAX_ECHO",
    "MAX_MESSAGE",
]


#: longest piece of its input (a name, a value, a location) an error message repeats, in characters;
#: longer ones are elided in the middle (:func:`clip`)
MAX_ECHO = 200
#: longest message of any :class:`StructgateError`, in characters (an HTTP 400 body, a CLI line)
MAX_MESSAGE = 2000


def clip(text: str, limit: int = MAX_ECHO, keep_newlines: bool = False) -> str:
    """``text`` with its control characters escaped (``\\x1b``: an input's terminal escape codes
    never reach a terminal or a log raw; newlines too unless ``keep_newlines``), and if longer
    than ``limit`` characters its head and tail around a count of the characters left out:
    ``'aaaa...[29,800 characters]...aa-b'``."""
    if not isinstance(text, str):
        return text
    if not text.isprintable():
        text = ("\n".join(_escape_controls(t) for t in text.split("\n")) if keep_newlines
                else _escape_controls(text))
    if len(text) <= limit:
        return text
    keep = max(2, limit - len(f"...[{len(text):,} characters]..."))
    head, tail = (2 * keep) // 3, keep - (2 * keep) // 3
    return f"{text[:head]}...[{len(text) - head - tail:,} characters]...{text[len(text) - tail:]}"


class StructgateError(Exception):
    """Base class of every structgate error.

    A message is at most :data:`MAX_MESSAGE` characters (a longer one is elided in the middle):
    messages repeat pieces of the input (rule names, group names, values), and a request's input
    can be megabytes.
    """

    #: short machine-readable kind, used in benchmark reports and JSON output
    kind: str = "error"

    def __init__(self, *args):
        if args and isinstance(args[0], str):
            args = (clip(args[0], MAX_MESSAGE, keep_newlines=True), *args[1:])
        super().__init__(*args)

    def __reduce__(self):
        # picklable whatever the subclass's __init__ takes (errors cross process boundaries: the
        # native backend's compile processes, vLLM's engine-core -> API-server messages)
        return (_rebuild_error, (type(self), self.args, dict(self.__dict__)))


def _rebuild_error(cls, args, state):
    e = cls.__new__(cls)
    Exception.__init__(e, *args)
    e.__dict__.update(state)
    return e


class GrammarSyntaxError(StructgateError, ValueError):
    """A regex / grammar / schema text that does not parse.

    Attributes
    ----------
    pattern : str
        The text that failed to parse.
    position : int
        0-based offset (in characters of ``pattern``) of the error.
    message : str
        What is wrong, without the caret display.
    where : str | None
        Where the pattern came from, e.g. a JSON pointer ``/properties/name/pattern``.
    """

    kind = "syntax"

    def __init__(self, message: str, pattern: str, position: int, where: str | None = None):
        self.message = clip(message)
        self.pattern = pattern
        self.position = max(0, min(position, len(pattern)))
        self.where = clip(where)
        super().__init__(str(self))

    #: characters of the error's line shown on each side of the error position by :meth:`caret`
    CARET_CONTEXT = 60

    def line_col(self) -> tuple[int, int]:
        """1-based line and column (in characters) of :attr:`position` in :attr:`pattern`."""
        line = self.pattern.count("\n", 0, self.position) + 1
        return line, self.position - (self.pattern.rfind("\n", 0, self.position) + 1) + 1

    def caret(self) -> str:
        """The error's line of :attr:`pattern` and a caret under the error position.

        Only that line is shown (a multi-line grammar is not flattened), and of it at most
        :attr:`CARET_CONTEXT` characters on each side of the error, elided with ``...`` (a 32 KB
        regex gives a two-line display, not the whole text). Control characters are shown escaped
        (``\\t``, ``\\x01``) so the caret stays under the character it points at.
        """
        return caret_display(self.pattern, self.position, self.CARET_CONTEXT)

    def __str__(self) -> str:
        loc = f" in {self.where}" if self.where else ""
        at = f"position {self.position}"
        if "\n" in self.pattern and "line " not in (self.where or ""):
            at += " (line {}, column {})".format(*self.line_col())
        # json's messages end in "at" ("Unterminated string starting at"): no "at at position"
        sep = " " if self.message.endswith(" at") else " at "
        return f"{self.message}{sep}{at}{loc}:\n{self.caret()}"


def caret_display(text: str, position: int, context: int = 60) -> str:
    """Two indented lines: the line of ``text`` holding character ``position`` (at most
    ``context`` characters each side of it, elided with ``...``; control characters escaped) and a
    caret under that character, placed by terminal columns (:func:`_width`). A position at the end
    of a text ending with a newline points after its last line with text."""
    pos = max(0, min(position, len(text)))
    if pos == len(text) and text.endswith("\n"):
        # "unexpected end" of a text ending with a newline (most files): the empty last line
        # says nothing; point just after the last line that has text
        pos = len(text.rstrip("\r\n"))
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    line = text[start:] if end < 0 else text[start:end]
    col = pos - start
    lo, hi = max(0, col - context), min(len(line), col + context)
    head = ("..." if lo > 0 else "") + _escape_controls(line[lo:col])
    tail = _escape_controls(line[col:hi]) + ("..." if hi < len(line) else "")
    return f"    {head}{tail}\n    {' ' * _width(head)}^"


def _width(text: str) -> int:
    """Terminal columns of ``text``: East Asian wide and full-width characters (CJK, most emoji)
    take two, combining marks none (Unicode Standard Annex #11)."""
    if text.isascii():
        return len(text)
    import unicodedata

    return sum(0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1
               for c in text)


def _escape_controls(text: str) -> str:
    """``text`` with C0/C1 control characters (tab, newline, ...) written as escapes."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


class UnsupportedFeatureError(StructgateError, ValueError):
    """A valid constraint that this backend cannot enforce exactly.

    Attributes
    ----------
    feature : str
        The keyword or construct, e.g. ``"allOf"``, ``"$ref (recursive)"``, ``"lookahead (?=...)"``.
    where : str | None
        JSON pointer into the schema, or a pattern position description.
    text, position : str | None, int | None
        For a construct inside a pattern or grammar text: that text and the construct's 0-based
        offset in it; the message then ends with the caret display of :class:`GrammarSyntaxError`
        (:func:`caret_display`).
    """

    kind = "unsupported"

    def __init__(self, feature: str, detail: str = "", where: str | None = None, *,
                 text: str | None = None, position: int | None = None):
        feature, detail, where = clip(feature), clip(detail), clip(where)
        self.feature = feature
        self.detail = detail
        self.where = where
        self.text = text
        self.position = position
        loc = f" at {where}" if where else ""
        msg = f"unsupported: {feature}{loc}"
        if detail:
            msg += f" ({detail})"
        #: the message without the caret display (as :attr:`GrammarSyntaxError.message`)
        self.message = msg
        if text is not None and position is not None:
            msg += ":\n" + caret_display(text, position, GrammarSyntaxError.CARET_CONTEXT)
        super().__init__(msg)


class CompileLimitError(StructgateError, ValueError):
    """A configured compile limit was exceeded.

    Attributes
    ----------
    limit_name : str
        Which limit, e.g. ``"max_dfa_states"``, ``"compile_timeout_s"``.
    given : int | float
        The value reached when compilation stopped.
    limit : int | float
        The configured limit.
    where : str | None
        JSON pointer of the schema keyword that needed more (``/properties/q/patternProperties``),
        where the compiler knows it; None otherwise. The hint names it too.
    """

    kind = "limit"

    def __init__(self, limit_name: str, given, limit, hint: str = "", where: str | None = None):
        self.limit_name = limit_name
        self.given = given
        self.limit = limit
        self.where = clip(where)
        msg = f"compile limit exceeded: {limit_name} reached {given} (limit {limit})"
        if hint:
            msg += f"; {hint}"
        super().__init__(msg)


class IncompatibleVocabularyError(StructgateError, ValueError):
    """The constraint needs bytes that no token of the vocabulary can produce, or the
    vocabulary does not fit the backend (e.g. no EOS token)."""

    kind = "vocabulary"


class VocabularyError(StructgateError, ValueError):
    """A tokenizer/vocabulary that cannot be loaded or is inconsistent."""

    kind = "vocabulary"


class InvalidConstraintError(StructgateError, ValueError):
    """A constraint or option value of the wrong shape: a non-string regex, an empty choice list,
    an unknown constraint kind, an unknown option value."""

    kind = "invalid"


class ConstraintKindError(StructgateError, ValueError):
    """The backend does not support this kind of constraint (e.g. ``grammar`` on a regular engine)."""

    kind = "unsupported"

    def __init__(self, backend: str, constraint_kind: str, supported):
        self.backend = backend
        self.constraint_kind = constraint_kind
        self.supported = tuple(sorted(supported))
        super().__init__(
            f"backend {backend!r} does not support constraint kind {constraint_kind!r}; "
            f"it supports: {', '.join(self.supported)}"
        )


class BackendNotFoundError(StructgateError, KeyError):
    """No backend is registered under this name."""

    kind = "not_found"

    def __init__(self, name: str, available, hint: str = ""):
        self.name = name
        self.available = tuple(sorted(available))
        self.hint = hint  #: e.g. "did you mean 'structgate-xgrammar'?" (a vLLM name, a typo)
        super().__init__(name)

    def __str__(self) -> str:
        hint = f"; {self.hint}" if self.hint else ""
        return (f"no structured-output backend named {self.name!r}{hint}; registered: "
                f"{', '.join(self.available) or '(none)'}")


class BackendUnavailableError(StructgateError, ImportError):
    """A backend is registered but its engine is not installed (``install_hint`` says how)."""

    kind = "unavailable"

    def __init__(self, name: str, reason: str, install_hint: str = ""):
        self.name = name
        self.reason = reason
        self.install_hint = install_hint
        msg = f"backend {name!r} is not available: {reason}"
        if install_hint:
            msg += f"; install it with: {install_hint}"
        super().__init__(msg)


class BitmaskError(StructgateError, ValueError):
    """A bitmask buffer of the wrong dtype, shape, device or layout was passed."""

    kind = "bitmask"


class MatcherStateError(StructgateError, RuntimeError):
    """Misuse of a matcher: rollback beyond its history, advancing after an error, ..."""

    kind = "state"


def rebuilt(e: StructgateError, args: tuple | None = None, **attrs) -> StructgateError:
    """A copy of ``e`` (same type; ``e`` is not modified) with the attributes ``attrs`` replaced.

    The message of a type that derives it from its attributes is derived again
    (:class:`UnsupportedFeatureError` from ``feature``/``detail``/``where``,
    :class:`GrammarSyntaxError` from its message, text, position and ``where``); any other type
    keeps ``e.args``, or takes ``args`` when given. Used to relocate an error raised for a part of
    a larger constraint (:func:`nested_error`, the legacy structural-tag fields)."""
    cls = type(e)
    state = {**e.__dict__, **attrs}
    if isinstance(e, UnsupportedFeatureError):
        new = cls.__new__(cls)
        UnsupportedFeatureError.__init__(new, state["feature"], state["detail"], state["where"],
                                         text=state.get("text"), position=state.get("position"))
        state.pop("message", None)  # derived by __init__ from the new fields, not copied
        new.__dict__.update(state)
        return new
    new = _rebuild_error(cls, e.args if args is None else args, state)
    if isinstance(new, GrammarSyntaxError):
        new.args = (str(new),)
    return new


def nested_error(e: StructgateError, outer: str) -> StructgateError:
    """``e``, raised for a constraint nested in another one (a JSON Schema or a grammar inside a
    structural tag), located from the outer constraint's side.

    Parameters
    ----------
    e : StructgateError
        The inner constraint's error (not modified).
    outer : str
        Where the inner constraint sits, e.g. ``"structural_tag /format/json_schema"``.

    Returns
    -------
    StructgateError
        A copy of the same type (:func:`rebuilt`): its ``where`` is ``outer`` followed by
        ``e.where`` (a JSON pointer is appended, ``/format/json_schema/properties/a/pattern``;
        another location, such as a grammar's ``line 3, column 7``, follows a comma); an error
        whose message is not derived from ``where`` (:class:`CompileLimitError`), or that has no
        ``where`` attribute, gets ``outer`` in front of its message.
    """
    if "where" in e.__dict__:
        inner = e.where
        where = outer if not inner else (outer + inner if inner.startswith("/") else f"{outer}, {inner}")
        if isinstance(e, (UnsupportedFeatureError, GrammarSyntaxError)):
            return rebuilt(e, where=where)  # (their message is derived from ``where``)
        return rebuilt(e, args=(f"{outer}: {e}",), where=where)
    return rebuilt(e, args=(f"{outer}: {e}",))
