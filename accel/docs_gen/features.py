"""The features page (``docs/reference/features.md``), from the registry: each feature's family, class, stage,
config options, what else it declares, the refusals its ``probe`` and ``check`` can give (read from their source
with ``ast``) and its conflicts (``feature_matrix/rules.yaml`` and the feature's own)."""

from __future__ import annotations

import ast
import inspect
import sys
import textwrap
from typing import Any

from accel.docs_gen.markdown import HEADER, cell, quoted
from accel.docs_gen.profile import option_table


def _message(node: ast.expr) -> str | None:
    """The text of a refusal message: a string, or an f-string with its expressions shown as ``{...}``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            elif isinstance(value, ast.FormattedValue):
                parts.append("{" + ast.unparse(value.value) + "}")
        return "".join(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _message(node.left), _message(node.right)
        return None if left is None or right is None else left + right
    return None


def _function_source(function: Any) -> ast.AST | None:
    try:
        return ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError):
        return None


def _refusals(owner: type, method: str, seen: set[object] | None = None) -> list[str]:
    """Every ``Support.no(...)`` message ``owner.method`` can return, following calls to the class's own
    methods and to functions of accel modules (so a shared ``_needs_sm89`` check is listed where used)."""
    seen = set() if seen is None else seen
    function = getattr(owner, method, None)
    if function is None or function in seen:
        return []
    seen.add(function)
    tree = _function_source(function)
    module = sys.modules.get(getattr(function, "__module__", ""), None)
    if tree is None:
        return []
    found: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        callee = node.func
        if isinstance(callee, ast.Attribute) and callee.attr == "no" and ast.unparse(callee.value) == "Support":
            text = _message(node.args[0]) if node.args else None
            found.append(text if text is not None else f"(a reason computed at run time: {ast.unparse(node)})")
        elif isinstance(callee, ast.Attribute) and isinstance(callee.value, ast.Name) and callee.value.id == "self":
            found += _refusals(owner, callee.attr, seen)
        elif isinstance(callee, ast.Name) and module is not None:
            target = getattr(module, callee.id, None)
            if inspect.isfunction(target) and target.__module__.startswith("accel."):
                found += _refusals(type("_", (), {callee.id: staticmethod(target)}), callee.id, seen)
    return list(dict.fromkeys(found))


def _rules_for(feature: Any) -> list[str]:
    from accel.features.rules import load_rules

    lines = []
    for rule in load_rules():
        for index, item in enumerate(rule.match):
            if item.feature == feature.name or (item.feature is None and item.family == feature.family):
                others = [other.describe() for i, other in enumerate(rule.match) if i != index]
                own = f" (with {', '.join(f'{k}={v}' for k, v in item.options)})" if item.options else ""
                lines.append(f"with {' and '.join(others)}{own}: {rule.reason} (source: {rule.source})")
                break
    return list(dict.fromkeys(lines))


def _overrides(feature: Any, method: str) -> bool:
    from accel.features.base import Feature

    return getattr(type(feature), method) is not getattr(Feature, method)


def _reach_text(feature: Any) -> str:
    """What the feature acts on, and what happens on a pipeline with a second denoiser (Wan 2.2's
    ``transformer_2``): a feature that would leave one untouched is refused rather than reported engaged."""
    from accel.features.base import Reach

    reach = Reach(feature.reach)
    hint = f"; {feature.untouched_hint}" if feature.untouched_hint else ""
    if _overrides(feature, "denoisers_reached"):
        return f"the denoisers its options name (refused while a denoiser is left out{hint})"
    if reach is Reach.FIRST_DENOISER:
        return f"{reach.value} (refused on a pipeline with a second denoiser{hint})"
    return str(reach.value)


def _feature_section(feature: Any, source: str) -> list[str]:
    from accel.features.base import Stage

    stage = feature.stage
    stage_text = f"{Stage(stage).name.lower()} ({int(stage)})" if stage in set(Stage) else f"{int(stage)}"
    config = feature.config_cls
    facts: list[tuple[str, str]] = [
        ("family", feature.family),
        (
            "class",
            feature.feature_class.value
            + (" (some options change it)" if _overrides(feature, "feature_class_for") else ""),
        ),
        ("stage (application order)", stage_text),
        ("reaches", _reach_text(feature)),
        ("config", f"`{config.__module__}.{config.__qualname__}`"),
        ("registered by", source),
    ]
    if feature.primary_option:
        facts.append(("scalar shorthand for", f"`{feature.primary_option}`"))
    if feature.lossy_limits is not None:
        limits = feature.lossy_limits
        facts.append(
            (
                "default lossy limits",
                f"SSIM >= {limits.ssim}, PSNR >= {limits.psnr} dB, adherence loss <= {limits.adherence_loss}",
            )
        )
    if feature.needs_steps:
        facts.append(("plans by step", "yes: `apply` needs `num_inference_steps` and refuses calls with other steps"))
    if _overrides(feature, "load_kwargs"):
        facts.append(("acts at load time", "with some options (`from_pretrained` keyword arguments)"))
    if feature.roofline_exempt:
        facts.append(("roofline exempt", feature.roofline_exempt))
    if feature.global_state:
        facts.append(("process-global state", ", ".join(f"`{name}`" for name in feature.global_state)))
    if feature.no_effect_on_cpu:
        facts.append(("no effect on a CPU", feature.no_effect_on_cpu))
    out = [f"## `{feature.name}`", "", cell(feature.description), "", "| | |", "|---|---|"]
    out += [f"| {name} | {cell(value)} |" for name, value in facts]
    option_lines, _ = option_table(config)
    out += ["", "**Options**", ""]
    out += option_lines if len(option_lines) > 2 else ["None."]
    environment = _refusals(type(feature), "probe")
    model = [reason for reason in _refusals(type(feature), "check") if reason not in environment]
    # A parallel feature's model and workload checks, made on the driver before any rank starts.
    before_launch = [reason for reason in _refusals(type(feature), "cell_support") if reason not in environment + model]
    out += [
        "",
        "**Requirements**: every refusal its `probe` (this device and installation) and its `check` (this "
        "pipeline) can give, from their source; `{...}` is filled in at run time.",
        "",
    ]
    out += [f"- environment: {quoted(reason)}" for reason in environment]
    out += [f"- pipeline: {quoted(reason)}" for reason in model]
    out += [f"- model and workload, before any rank starts: {quoted(reason)}" for reason in before_launch]
    if not environment and not model and not before_launch:
        out.append("- none declared")
    conflicts = _rules_for(feature)
    out += ["", "**Conflicts** (refused before anything runs)", ""]
    out += [f"- {cell(line)}" for line in conflicts] or ["- none"]
    return [*out, ""]


def features_page(plugins: bool = False) -> str:
    """Every built-in feature (with ``plugins``, also the installed entry-point ones), in application order."""
    from accel.features import FEATURES

    chosen = [(name, FEATURES.source(name)) for name in FEATURES]
    if not plugins:
        chosen = [(name, source) for name, source in chosen if source == "built-in"]
    chosen.sort(key=lambda item: (int(FEATURES[item[0]].stage), item[0]))
    out = [
        HEADER,
        "# Features",
        "",
        "Every feature from the registry (`accel.features.FEATURES`), in application order (stage, then name): "
        "its declarations, its options (the YAML keys under a variant's feature, and the fields of its config "
        "class for `apply`), what it needs and what it cannot be combined with. Features that other packages "
        "register through the `omni_accel.features` entry point are listed the same way by "
        "`python -m accel.docs_gen --plugins --out DIR`. How features are used, and the evidence each collects: "
        "[Features](../features.md).",
        "",
        "| feature | family | class | stage |",
        "|---|---|---|---|",
    ]
    for name, _ in chosen:
        feature = FEATURES[name]
        out.append(f"| [`{name}`](#{name}) | {feature.family} | {feature.feature_class.value} | {int(feature.stage)} |")
    out.append("")
    for name, source in chosen:
        out += _feature_section(FEATURES[name], source)
    return "\n".join(out)
