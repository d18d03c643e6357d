"""``structgate backends [--json]``: list registered backends with version and availability."""
from __future__ import annotations

import json
import os


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
        # a backend's name is never broken (it is what --backend takes); other cells fold when narrow
        t.add_column(col, overflow="fold", no_wrap=col == "name")
    for i in infos:
        note = "" if i.available else f"{i.reason}; {i.install_hint}"
        t.add_row(i.name, i.version or "-", "yes" if i.available else "no", ", ".join(i.aliases), i.plugin, note)
    console = Console()
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        # a pipe or a file has no width: the whole table, no name broken (Rich would assume 80 columns)
        console.width = max(console.width, console.measure(t, options=console.options.update_width(1 << 16)).maximum)
    console.print(t)
    return 0
