"""The pages read off the Python code itself: the Python API (``api.md``, mkdocstrings directives rendered at
build time from the docstrings), the module map (``modules.md``, each module's docstring) and the results record
(``results-record.md``, the keys ``accel.results.CellRecord`` declares)."""

from __future__ import annotations

import ast

from accel.docs_gen.markdown import HEADER, ROOT, cell


def results_page() -> str:
    """The record's keys, section by section, from ``accel.results.record_fields_markdown``."""
    from accel.results import record_fields_markdown

    return "\n".join(
        [
            HEADER,
            "# Results record",
            "",
            "The keys of a cell's record, from their declaration (`accel/record.py`: `CellRecord`, one "
            "`TypedDict` per section). What the record is for and how its versions are read: "
            "[The results record](../results.md).",
            "",
            record_fields_markdown(),
        ]
    )


def api_page() -> str:
    """mkdocstrings directives: ``apply`` and its handle, the feature contract, and every built-in config."""
    from accel.features import FEATURES

    configs = sorted(
        {
            f"{f.config_cls.__module__}.{f.config_cls.__qualname__}"
            for n, f in FEATURES.items()
            if FEATURES.source(n) == "built-in"
        }
    )
    out = [
        HEADER,
        "# Python API",
        "",
        "Rendered from the docstrings by mkdocstrings. `from accel import apply` is the entry point; every "
        "feature's config class is exported from `accel.features`. A walk-through: [Use it from Python]"
        "(../features.md#use-it-from-python).",
        "",
        "## Applying features",
        "",
        "::: accel.features.applied.apply",
        "",
        "::: accel.features.applied.Applied",
        "",
        "::: accel.features.applied.FeatureUnavailable",
        "",
        "::: accel.errors.ConfigError",
        "",
        "## Feature configs",
        "",
    ]
    for config in configs:
        out += [f"::: {config}", ""]
    out += [
        "## Writing a feature",
        "",
        "::: accel.features.base.Feature",
        "",
        "::: accel.features.base.Handle",
        "",
        "::: accel.features.base.Verdict",
        "",
        "::: accel.features.base.Support",
        "",
        "::: accel.features.base.Conflict",
        "",
    ]
    return "\n".join(out)


def modules_page() -> str:
    """Each module of ``accel`` with the first paragraph of its docstring."""
    package = ROOT / "accel"
    out = [
        HEADER,
        "# Module map",
        "",
        "Every module of the `accel` package with the first paragraph of its docstring (a module without one "
        "says so: give it one). Imports go one way, in the layer order `tests/test_imports.py` enforces "
        "(`LAYERS`, and `PACKAGE_LAYERS` inside a package split by concern): "
        "(docs_gen, bytecode) -> (__main__, cli, pytest_plugin) -> (sweep, calibrate, tune, diverge) "
        "-> (report, gate) -> (results, record) -> (targets, features, engines, profile) -> (native, env) "
        "-> (measure, outputs, calibration) -> zoo -> (errors, cpu_time, data, yaml_bounds, ranksup, raised_in).",
        "",
        "| module | what it holds |",
        "|---|---|",
    ]
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(ROOT)
        name = ".".join(relative.with_suffix("").parts).removesuffix(".__init__")
        docstring = ast.get_docstring(ast.parse(path.read_text(), str(path)))
        summary = docstring.split("\n\n")[0] if docstring else "(no docstring)"
        out.append(f"| `{name}` | {cell(summary)} |")
    return "\n".join(out) + "\n"
