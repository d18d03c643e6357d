"""``structgate-vllm``: run vLLM's own CLI with structgate's backends, robustly.

Usage::

    structgate-vllm serve MODEL --structured-output-backend native [any vllm serve option]
    structgate-vllm --ledger              # print the monkeypatch ledger and what applied
    structgate-vllm --install-cpu-shim    # make the plain `vllm` command work with vllm-cpu
    structgate-vllm --plain serve ...     # vLLM's CLI exactly (no rewrite, plugin via its entry
                                          # point), only with the CPU version shim of step 3

What it does before handing over to ``vllm.entrypoints.cli.main.main``:

1. Rewrites ``--structured-output-backend NAME`` into ``--structured-outputs-config.backend NAME``
   (an error if both are given with different names). This is the documented fallback for a vLLM
   release where the in-process flag (patch ``cli-flag``) breaks.
2. Applies the plugin (:func:`structgate.plugin.register`), so it works even where the
   ``vllm.general_plugins`` entry point is not installed (a source checkout).
3. CPU builds (the ``vllm-cpu`` distribution): answers ``importlib.metadata.version("vllm")``
   with the ``vllm-cpu`` version plus ``+cpu`` (vLLM's CLI asks for it before anything else and
   fails otherwise) and sets ``VLLM_TARGET_DEVICE=cpu`` and ``VLLM_CPU_KVCACHE_SPACE=1`` (GiB)
   unless already set.

``--install-cpu-shim`` instead writes a metadata-only ``vllm-<version>+cpu.dist-info`` next to
``vllm-cpu``'s, so plain ``vllm ...`` works too (``pip uninstall vllm`` removes just the shim).
"""
from __future__ import annotations

import os
import sys

__all__ = ["main", "rewrite_argv", "setup_cpu_env", "install_cpu_shim", "is_vllm_cpu"]

FLAG = "--structured-output-backend"
CONFIG_FLAG = "--structured-outputs-config.backend"


def rewrite_argv(argv: list[str]) -> list[str]:
    """Replace ``--structured-output-backend NAME`` / ``=NAME`` by
    ``--structured-outputs-config.backend NAME``.

    Raises
    ------
    SystemExit
        The flag has no value, or conflicts with ``--structured-outputs-config.backend``.
    """
    out: list[str] = []
    name = None
    given = None
    i = 0
    alt = FLAG.replace("-", "_")[2:]
    while i < len(argv):
        a = argv[i]
        key, eq, val = a.partition("=")
        if key in (FLAG, "--" + alt):
            if not eq:
                if i + 1 >= len(argv) or argv[i + 1].startswith("--"):
                    raise SystemExit(f"structgate-vllm: error: {FLAG} needs a backend name")
                val = argv[i + 1]
                i += 1
            name = val
        else:
            if key in (CONFIG_FLAG, CONFIG_FLAG.replace("-", "_")):
                given = val if eq else (argv[i + 1] if i + 1 < len(argv) else None)
            out.append(a)
        i += 1
    if name is not None:
        if given is not None and given != name:
            raise SystemExit(f"structgate-vllm: error: {FLAG} {name} conflicts with {CONFIG_FLAG} {given}")
        if given is None:
            out += [CONFIG_FLAG, name]
    return out


def is_vllm_cpu() -> bool:
    """True when vLLM is installed as the ``vllm-cpu`` distribution (a CPU build)."""
    import importlib.metadata as md

    try:
        md.distribution("vllm-cpu")
        return True
    except md.PackageNotFoundError:
        return False


def _has_vllm_dist() -> bool:
    import importlib.metadata as md

    try:
        md.distribution("vllm")
        return True
    except md.PackageNotFoundError:
        return False


def setup_cpu_env(environ: "os._Environ | dict | None" = None, *, shim_version: bool = True) -> bool:
    """On ``vllm-cpu``: version shim for ``importlib.metadata.version("vllm")`` (this process;
    unless ``shim_version=False``) and default ``VLLM_TARGET_DEVICE=cpu``,
    ``VLLM_CPU_KVCACHE_SPACE=1`` in ``environ`` (default ``os.environ``, inherited by vLLM's
    processes). Returns True if it was a CPU build."""
    env = os.environ if environ is None else environ
    if not is_vllm_cpu():
        return False
    import importlib.metadata as md

    if shim_version and not getattr(md.version, "__structgate_shim__", False) and not _has_vllm_dist():
        cpu_version = md.version("vllm-cpu")
        orig = md.version

        def version(name: str) -> str:
            if name.lower().replace("_", "-") == "vllm":
                return cpu_version if "cpu" in cpu_version else cpu_version + "+cpu"
            return orig(name)

        version.__structgate_shim__ = True  # type: ignore[attr-defined]
        md.version = version  # type: ignore[assignment]
    env.setdefault("VLLM_TARGET_DEVICE", "cpu")
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    return True


def install_cpu_shim() -> str | None:
    """Write ``vllm-<v>+cpu.dist-info`` (METADATA, INSTALLER, RECORD only) next to ``vllm-cpu``'s
    metadata so ``importlib.metadata.version("vllm")`` works for every process. Returns the folder
    written, or None when not needed (a ``vllm`` distribution exists, or vLLM is absent)."""
    import importlib.metadata as md
    import pathlib

    if not is_vllm_cpu() or _has_vllm_dist():
        return None
    dist = md.distribution("vllm-cpu")
    v = dist.version if "cpu" in dist.version else dist.version + "+cpu"
    site = pathlib.Path(str(dist.locate_file("")))
    d = site / f"vllm-{v}.dist-info"
    d.mkdir(exist_ok=True)
    (d / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: vllm\nVersion: {v}\nSummary: structgate shim: vLLM is installed as "
        f"vllm-cpu {dist.version}; this metadata-only entry lets vLLM's CLI read its version\n")
    (d / "INSTALLER").write_text("structgate\n")
    (d / "RECORD").write_text("\n".join(f"{d.name}/{n},," for n in ("METADATA", "INSTALLER", "RECORD")) + "\n")
    return str(d)


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point (``structgate-vllm``). Returns vLLM's exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--install-cpu-shim"]:
        path = install_cpu_shim()
        print(f"structgate-vllm: wrote {path}" if path else "structgate-vllm: no shim needed")
        return 0
    setup_cpu_env()
    if argv[:1] == ["--ledger"]:
        from . import ledger, register

        try:
            register()
            import vllm.config.structured_outputs  # noqa: F401
            import vllm.engine.arg_utils  # noqa: F401
            import vllm.sampling_params  # noqa: F401
            import vllm.v1.structured_output  # noqa: F401
        except Exception as e:  # noqa: BLE001
            print(f"structgate-vllm: {type(e).__name__}: {e}", file=sys.stderr)
        print(ledger.describe())
        return 1 if ledger.errors() else 0
    if argv[:1] == ["--plain"]:
        argv = argv[1:]
    else:
        argv = rewrite_argv(argv)
        from . import register

        register()
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", *argv]
    rc = vllm_main()
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
