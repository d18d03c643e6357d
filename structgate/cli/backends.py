"""``structgate backends [--json]``: list registered backends with version and availability."""
from __future__ import annotations

import json


def add_parser(sub) -> None:
    p = sub.add_parser("backends", help="list registered backends, their versions and availability")
    p.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..backends.registry import list_backends

    infos = list_backends()
    if args.json:
        print(json.dumps([i.as_dict() for i in infos], indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    t = Table(title="structgate backends")
    for col in ("name", "version", "available", "aliases", "plugin", "note"):
        t.add_column(col, overflow="fold")
    for i in infos:
        note = "" if i.available else f"{i.reason}; {i.install_hint}"
        t.add_row(i.name, i.version or "-", "yes" if i.available else "no", ", ".join(i.aliases), i.plugin, note)
    Console().print(t)
    return 0
