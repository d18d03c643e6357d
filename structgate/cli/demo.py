"""``structgate demo``: a real ``vllm serve`` with a structgate backend, real requests, checked outputs.

Starts ``vllm serve`` on the embedded tiny model (:mod:`structgate.plugin.model`) with
``--structured-output-backend NAME`` (default ``native``), waits for ``/health``, sends

* chat completions with ``response_format: {"type": "json_schema", ...}`` for several schemas of
  different shapes (nested objects, arrays with minItems/maxItems, enums, numbers and integers with
  ranges, optional properties, strings with patterns and maxLength), plus any ``--schemas`` file
  (one JSON Schema per line);
* completions with ``structured_outputs: {"regex": ...}`` and ``{"choice": [...]}``;

validates every output (``jsonschema`` for schemas, ``re.fullmatch`` for regexes, membership for
choices) and classifies it (:data:`OUTCOMES`): ``valid``; ``cut`` (the model ran out of
``max_tokens`` with an output that is a valid *prefix*, checked byte by byte with the native engine;
a random model writing a long unbounded string does this); ``invalid``; ``unsupported`` (the
backend refused the request with a typed :class:`~structgate.errors.UnsupportedFeatureError`, an
HTTP 400 naming it: the backend does not support that constraint, e.g. outlines-core and integer
bounds, so the request is reported and skipped); ``error`` (the request failed otherwise). It prints a table (request, backend, tokens, latency, result), and always shuts the server
down (also on errors and Ctrl-C). Exit status: 0 no output invalid and no request failed (``cut``
and ``unsupported`` outputs are reported, not failures), 1 otherwise, 2 a usage error (bad ``--schemas`` file, unknown
backend), 130 interrupted.

The model has random weights: it writes nonsense inside the structure, and every output must still
be valid.
"""
from __future__ import annotations

import json
import pathlib
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from .. import _jsontext
from .argtypes import PORT, number_in

#: ``structgate demo --help`` text (plain, not reStructuredText)
HELP = ("Start vllm serve on the embedded tiny model (random weights) with --structured-output-backend "
        "NAME, send JSON-schema chat completions and regex / choice completions, and check every output "
        "(jsonschema, re.fullmatch, membership). Each output is reported as valid, cut (stopped at "
        "max_tokens with a valid prefix), invalid, unsupported (the backend refused the constraint with a "
        "typed unsupported-feature error; skipped) or error. Exit status: 0 when no output is invalid and "
        "no request failed, 1 otherwise, 2 on a usage error (unknown backend, bad --schemas file).")

#: (name, JSON Schema) sent as chat completions with response_format json_schema
DEMO_SCHEMAS: list[tuple[str, dict]] = [
    ("person (nested object, integer range, pattern)", {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 12},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "address": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "maxLength": 16},
                    "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
                },
                "required": ["city", "zip"],
            },
        },
        "required": ["name", "age", "address"],
    }),
    ("order (array of objects, minItems/maxItems, enum)", {
        "type": "object",
        "properties": {
            "order_id": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
            "status": {"enum": ["pending", "shipped", "delivered", "cancelled"]},
            "items": {
                "type": "array", "minItems": 1, "maxItems": 3,
                "items": {
                    "type": "object",
                    "properties": {
                        "sku": {"type": "string", "maxLength": 8},
                        "quantity": {"type": "integer", "minimum": 1, "maximum": 99},
                    },
                    "required": ["sku", "quantity"],
                },
            },
        },
        "required": ["order_id", "status", "items"],
    }),
    ("reading (number range, optional properties, boolean)", {
        "type": "object",
        "properties": {
            "sensor": {"type": "string", "maxLength": 10},
            "celsius": {"type": "number", "minimum": -40, "maximum": 85},
            "ok": {"type": "boolean"},
            "note": {"type": "string", "maxLength": 20},
        },
        "required": ["sensor", "celsius"],
    }),
    ("tags (array of enums with bounds)", {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "minItems": 2, "maxItems": 4,
                     "items": {"enum": ["red", "green", "blue", "cyan"]}},
            "priority": {"type": "integer", "minimum": 1, "maximum": 5},
        },
        "required": ["tags", "priority"],
    }),
    ("point list (array of arrays)", {
        "type": "array", "minItems": 1, "maxItems": 3,
        "items": {"type": "array", "minItems": 2, "maxItems": 2,
                  "items": {"type": "integer", "minimum": -100, "maximum": 100}},
    }),
]

#: (name, regex) sent as completions with structured_outputs.regex
DEMO_REGEXES: list[tuple[str, str]] = [
    ("ISO date", r"20[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"),
    ("US phone", r"\([0-9]{3}\) [0-9]{3}-[0-9]{4}"),
    ("email-like", r"[a-z]{1,8}\.[a-z]{1,8}@(example|test)\.(com|org)"),
    ("hex colour", r"#[0-9a-f]{6}"),
]

#: (name, choices) sent as completions with structured_outputs.choice
DEMO_CHOICES: list[tuple[str, list[str]]] = [
    ("sentiment", ["positive", "negative", "neutral"]),
    ("yes/no", ["yes", "no"]),
]

MAX_TOKENS = 512

#: what each output is, in report order
OUTCOMES = ("valid", "cut", "invalid", "unsupported", "error")


@dataclass
class DemoResult:
    """One row of the demo table."""

    request: str
    kind: str
    backend: str
    tokens: int | None = None
    latency_ms: float | None = None
    valid: bool = False
    outcome: str = "error"
    output: str | None = None
    error: str | None = None
    finish_reason: str | None = None
    extra: dict = field(default_factory=dict)


def add_parser(sub) -> None:
    p = sub.add_parser("demo", help="start vllm serve on the embedded tiny model and check structured outputs",
                       description=HELP)
    p.add_argument("--backend", default="native",
                   help="structured-output backend name (structgate or vLLM's own); default: native")
    p.add_argument("--schemas", metavar="FILE.jsonl", help="extra JSON Schemas, one per line, sent as json_schema requests")
    p.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    p.add_argument("--port", type=PORT, default=None, help="server port, 1-65535 (default: a free one)")
    p.add_argument("--timeout", type=number_in(0.0, strict=True, what="number of seconds"), default=600.0,
                   help="seconds to wait for the server to start, > 0 (default 600)")
    p.add_argument("--keep-log", action="store_true", help="print the server log path and keep the file")
    p.set_defaults(func=run)


def load_schemas(path: str) -> list[tuple[str, dict]]:
    """Read a JSONL file of JSON Schemas (blank lines and ``#`` lines skipped).

    Raises
    ------
    UsageError
        The file cannot be read (missing, a folder, not UTF-8) or holds no schema.
    GrammarSyntaxError
        A line that is not JSON, or not a JSON object/boolean (with its line number).
    """
    from ..errors import GrammarSyntaxError
    from . import UsageError

    out = []
    try:
        text = pathlib.Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise UsageError(f"cannot read the --schemas file {path!r}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise UsageError(f"the --schemas file {path!r} is not UTF-8 text (byte {e.start}): expected JSONL, "
                         "one JSON Schema per line") from None
    for i, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        try:
            schema = _jsontext.loads(s)
        except json.JSONDecodeError as e:
            raise GrammarSyntaxError(f"{path} line {i}: not JSON: {e.msg}", s, e.pos) from None
        if not isinstance(schema, (dict, bool)):
            raise GrammarSyntaxError(f"{path} line {i}: a JSON Schema must be an object or a boolean", s, 0)
        title = schema.get("title") if isinstance(schema, dict) else None
        out.append((f"{pathlib.Path(path).name}:{i}" + (f" ({title})" if title else ""), schema))
    if not out:
        raise UsageError(f"the --schemas file {path!r} holds no schema: expected JSONL, one JSON Schema per line")
    return out


def build_requests(extra_schemas: list[tuple[str, dict]] = ()) -> list[dict]:
    """The demo's requests: ``{"name", "kind", "path", "body", "check"}`` dicts."""
    reqs = []
    for i, (name, schema) in enumerate([*DEMO_SCHEMAS, *extra_schemas]):
        reqs.append({
            "name": name, "kind": "json_schema", "path": "/v1/chat/completions", "check": ("json_schema", schema),
            "body": {"messages": [{"role": "user", "content": f"Reply with a JSON value for: {name}."}],
                     "response_format": {"type": "json_schema",
                                         "json_schema": {"name": f"schema_{i}", "schema": schema, "strict": True}},
                     "max_tokens": MAX_TOKENS, "seed": 1000 + i}})
    for i, (name, pattern) in enumerate(DEMO_REGEXES):
        reqs.append({"name": name, "kind": "regex", "path": "/v1/completions", "check": ("regex", pattern),
                     "body": {"prompt": f"A {name}: ", "structured_outputs": {"regex": pattern},
                              "max_tokens": 64, "seed": 2000 + i}})
    for i, (name, choices) in enumerate(DEMO_CHOICES):
        reqs.append({"name": name, "kind": "choice", "path": "/v1/completions", "check": ("choice", choices),
                     "body": {"prompt": f"Pick one ({name}): ", "structured_outputs": {"choice": choices},
                              "max_tokens": 16, "seed": 3000 + i}})
    return reqs


def check_output(check: tuple[str, Any], text: str) -> tuple[bool, str | None]:
    """Validate ``text`` against the request's oracle; returns ``(valid, why_not)``."""
    kind, spec = check
    if kind == "json_schema":
        import jsonschema

        try:
            value = _jsontext.loads(text)
        except json.JSONDecodeError as e:
            return False, f"not JSON: {e.msg} at {e.pos}"
        try:
            jsonschema.validate(value, spec, cls=jsonschema.validators.validator_for(spec))
        except jsonschema.ValidationError as e:
            return False, f"schema violation: {e.message}"
        return True, None
    if kind == "regex":
        return (True, None) if re.fullmatch(spec, text) else (False, "no full match")
    if kind == "choice":
        return (True, None) if text in spec else (False, "not one of the choices")
    raise ValueError(kind)


def send(client, base_url: str, req: dict, backend: str, model: str) -> DemoResult:
    """POST one request and validate its output."""
    res = DemoResult(request=req["name"], kind=req["kind"], backend=backend)
    body = {"model": model, **req["body"]}
    t0 = time.perf_counter()
    try:
        r = client.post(base_url + req["path"], json=body)
    except Exception as e:  # noqa: BLE001 - reported in the table
        res.error = f"{type(e).__name__}: {e}"
        return res
    res.latency_ms = (time.perf_counter() - t0) * 1000.0
    if r.status_code != 200:
        res.error = f"HTTP {r.status_code}: {r.text[:300]}"
        if is_unsupported_refusal(r.status_code, r.text):
            res.outcome = "unsupported"
            res.error = "backend does not support it: " + _error_message(r.text)[:300]
        return res
    data = r.json()
    choice = data["choices"][0]
    text = choice["message"]["content"] if "message" in choice else choice["text"]
    res.output = text
    res.finish_reason = choice.get("finish_reason")
    res.tokens = (data.get("usage") or {}).get("completion_tokens")
    res.valid, why = check_output(req["check"], text or "")
    res.outcome = classify(req["check"], text or "", res.valid, res.finish_reason)
    if not res.valid:
        res.error = f"{why} (finish_reason={res.finish_reason})"
        if res.outcome == "cut":
            res.error = f"cut at max_tokens ({res.tokens} tokens) with a valid prefix"
    return res


def _error_message(body: str) -> str:
    try:
        msg = json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return body
    return msg if isinstance(msg, str) else body


def is_unsupported_refusal(status_code: int, body: str) -> bool:
    """Whether an HTTP response is the backend's typed refusal of the constraint: a 400 whose error
    message names :class:`~structgate.errors.UnsupportedFeatureError` or
    :class:`~structgate.errors.ConstraintKindError` (a backend without that constraint kind; the
    structgate plugin puts the error's class name into vLLM's 400 message). Other 400s (syntax
    errors, limits) are errors."""
    msg = _error_message(body)
    return status_code == 400 and ("UnsupportedFeatureError" in msg or "ConstraintKindError" in msg)


def is_viable_prefix(check: tuple[str, Any], text: str) -> bool | None:
    """Whether ``text`` can still be completed to a valid output (native engine on a byte-level
    vocabulary, byte by byte); None when native cannot compile the constraint."""
    from ..backends.interface import Constraint
    from ..backends.registry import get_backend
    from ..errors import StructgateError
    from ..vocab import Vocabulary

    kind, spec = check
    constraint = {"json_schema": Constraint.json_schema, "regex": Constraint.regex,
                  "choice": Constraint.choice}[kind](spec)
    vocab = Vocabulary([bytes([b]) for b in range(256)] + [b""], eos_token_ids=[256])
    try:
        g = get_backend("native", vocab).compile(constraint)
    except StructgateError:
        return None
    m = g.matcher()
    return all(m.advance(b) for b in text.encode("utf-8"))


def classify(check: tuple[str, Any], text: str, valid: bool, finish_reason: str | None) -> str:
    """One of :data:`OUTCOMES` for a finished request (``error`` is set by :func:`send` itself):
    ``cut`` when the output is invalid only because it stopped at ``max_tokens`` (finish reason
    ``length`` and a viable prefix; a constraint native cannot compile counts its prefix as viable)."""
    if valid:
        return "valid"
    if finish_reason == "length" and is_viable_prefix(check, text) is not False:
        return "cut"
    return "invalid"


def run(args) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from ..backends.registry import get_backend_spec
    from ..errors import BackendNotFoundError

    console = Console(stderr=True)
    backend = args.backend
    if backend not in ("auto", "xgrammar", "guidance", "outlines", "lm-format-enforcer"):
        spec = get_backend_spec(backend)  # BackendNotFoundError -> exit 2 (cli main)
        ok, reason = spec.availability()
        if not ok:
            from ..errors import BackendUnavailableError

            raise BackendUnavailableError(spec.name, reason, spec.install_hint)
    _ = BackendNotFoundError
    extra = load_schemas(args.schemas) if args.schemas else []
    requests = build_requests(extra)

    import httpx

    from ..plugin.model import embedded_model_dir
    from ..plugin.server import ServerStartError, VllmServer

    with console.status("preparing the embedded tiny model (first run: a few seconds)"):
        model_dir = embedded_model_dir()
    server = VllmServer(backend=backend, model=str(model_dir), port=args.port)
    results: list[DemoResult] = []
    rc = 0
    try:
        server.start()
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                      TimeElapsedColumn(), console=console, transient=False) as progress:
            t_start = progress.add_task(f"starting vllm serve --structured-output-backend {backend}", total=None)
            try:
                waited = server.wait_ready(timeout_s=args.timeout)
            except ServerStartError as e:
                progress.stop()
                console.print(start_failure(e), markup=False, highlight=False)
                return 1
            progress.update(t_start, description=f"vllm serve ready in {waited:.0f} s", total=1, completed=1)
            t_req = progress.add_task("requests", total=len(requests))
            with httpx.Client(timeout=300.0) as client:
                for req in requests:
                    progress.update(t_req, description=f"request: {req['name'][:40]}")
                    results.append(send(client, server.url, req, backend, server.served_model_name))
                    progress.advance(t_req)
            progress.update(t_req, description="requests done")
    except KeyboardInterrupt:
        console.print("[yellow]interrupted: stopping the server[/yellow]")
        rc = 130
    finally:
        with console.status("stopping vllm serve"):
            server.stop()
        if args.keep_log:
            console.print(f"server log: {server.log_path}")
        else:
            try:
                server.log_path.unlink()
            except OSError:
                pass
    if rc:
        return rc
    counts = {o: sum(r.outcome == o for r in results) for o in OUTCOMES}
    if args.json:
        print(json.dumps({"backend": backend, **counts, "total": len(results),
                          "results": [asdict(r) for r in results]}, indent=2))
    else:
        _print_table(results, backend)
    return exit_status(results)


def start_failure(e) -> str:
    """What ``demo`` prints when ``vllm serve`` did not come up (a
    :class:`~structgate.plugin.server.ServerStartError`): what happened (exited with status N, or
    did not answer within N s), then the server's last output, or that it wrote none."""
    what = getattr(e, "message", None) or str(e).split("\n", 1)[0]
    tail = (e.log_tail or "").rstrip()
    return f"vllm serve failed to start: {what}\n" + (
        f"--- last server output ---\n{tail}" if tail else "(the server wrote no output)")


def exit_status(results: list[DemoResult]) -> int:
    """0 when no output is invalid and no request failed (``cut`` outputs and ``unsupported``
    refusals do not fail the demo)."""
    return 1 if any(r.outcome in ("invalid", "error") for r in results) else 0


def _print_table(results: list[DemoResult], backend: str) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"structgate demo — vllm serve --structured-output-backend {backend}")
    for col, kw in (("request", {}), ("kind", {}), ("backend", {}), ("tokens", {"justify": "right"}),
                    ("latency", {"justify": "right"}), ("result", {}), ("output", {"overflow": "fold", "max_width": 60})):
        t.add_column(col, **kw)
    from rich.markup import escape

    for r in results:
        out = re.sub(r"\s+", " ", r.output) if r.output is not None else ""  # display only
        shown = escape(out if len(out) <= 120 else out[:117] + "...")
        if r.error:
            tone = "yellow" if r.outcome in ("cut", "unsupported") else "red"
            shown = (shown + "\n" if shown else "") + f"[{tone}]{escape(r.error)}[/{tone}]"
        t.add_row(escape(r.request), r.kind, r.backend, "-" if r.tokens is None else str(r.tokens),
                  "-" if r.latency_ms is None else f"{r.latency_ms:.0f} ms",
                  _STYLE[r.outcome], shown)
    c = Console()
    c.print(t)
    counts = {o: sum(r.outcome == o for r in results) for o in OUTCOMES}
    colour = "red" if exit_status(results) else "green"
    c.print(f"[{colour}]{len(results)} outputs: " + ", ".join(f"{n} {o}" for o, n in counts.items())
            + f"[/{colour}] (cut = stopped at max_tokens with a valid prefix; unsupported = the backend refused "
            "the constraint with a typed error, skipped; outputs shown with whitespace collapsed; --json prints "
            "them exactly)")


_STYLE = {"valid": "[green]valid[/green]", "cut": "[yellow]cut[/yellow]", "invalid": "[red]INVALID[/red]",
          "unsupported": "[yellow]unsupported[/yellow]", "error": "[red]ERROR[/red]"}
