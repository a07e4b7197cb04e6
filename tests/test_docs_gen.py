"""The manual's reference pages are generated from the code (``accel.docs_gen``) and never stale: adding a profile
key or a feature option without regenerating them fails here (and in ``make test``'s ``--check``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import Field, create_model

from accel import docs_gen
from accel.docs_gen.api import modules_page
from accel.docs_gen.cli import cli_page
from accel.docs_gen.features import features_page
from accel.docs_gen.profile import profile_page
from accel.features import FEATURES

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "docs" / "reference"


def test_the_committed_reference_pages_are_current():
    stale = docs_gen.stale_pages()
    assert not stale, docs_gen.stale_message(stale)


def test_the_stale_check_names_the_pages_and_the_command_and_writes_nothing(tmp_path, capsys):
    assert docs_gen.main(["--check", "--out", str(tmp_path)]) == 1
    error = capsys.readouterr().err
    assert "stale generated page(s): profile.md, features.md" in error
    assert "regenerate them with 'python -m accel.docs_gen (make docs-reference)'" in error
    assert list(tmp_path.iterdir()) == []
    assert docs_gen.main(["--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(docs_gen.PAGES)
    assert docs_gen.main(["--check", "--out", str(tmp_path)]) == 0


def test_a_new_profile_key_changes_the_profile_page(monkeypatch):
    """A key added to a nested section (measure) appears with its type, default, bounds and description."""
    import accel.profile as profile

    measure = create_model(
        "Measure",
        __base__=profile.Measure,
        brand_new_key=(int, Field(default=7, ge=2, description="A key nobody documented by hand.")),
    )
    patched = create_model("Profile", __base__=profile.Profile, measure=(measure, Field(default_factory=measure)))
    monkeypatch.setattr(profile, "Profile", patched)
    page = profile_page()
    assert "| `measure.brand_new_key` | integer | `7` | >= 2 | A key nobody documented by hand. |" in page
    assert page.rstrip("\n") + "\n" != (REFERENCE / "profile.md").read_text()


def test_a_new_feature_option_changes_the_features_page(monkeypatch):
    feature = FEATURES["tea_cache"]
    config = create_model(
        "TeaCacheConfig",
        __base__=feature.config_cls,
        skip_budget=(float, Field(default=0.5, gt=0, le=1, description="Share of steps it may skip.")),
    )
    monkeypatch.setattr(type(feature), "config_cls", config)
    page = features_page()
    assert "| `skip_budget` | number | `0.5` | > 0; <= 1 | Share of steps it may skip. |" in page
    assert page.rstrip("\n") + "\n" != (REFERENCE / "features.md").read_text()


def test_every_built_in_feature_has_its_declarations_options_requirements_and_conflicts():
    page = features_page()
    for name, feature in FEATURES.items():
        if FEATURES.source(name) != "built-in":
            continue
        section = page.split(f"## `{name}`\n", 1)[1].split("\n## ", 1)[0]
        assert f"| family | {feature.family} |" in section
        assert f"| class | {feature.feature_class.value}" in section
        assert f"({int(feature.stage)}) |" in section
        for option in feature.config_cls.model_fields:
            assert f"| `{option}` |" in section, (name, option)
        assert "**Requirements**" in section and "**Conflicts**" in section
    # A refusal made in a helper function of the feature's module is found (quant's probe -> _needs_sm89) ...
    quant = page.split("## `quantization`\n", 1)[1].split("\n## ", 1)[0]
    assert "- environment: `needs a CUDA GPU with SM >= 8.9 (found: {device})`" in quant
    # ... and rules.yaml's conflicts are listed for the features and families they name.
    compile_section = page.split("## `compile`\n", 1)[1].split("\n## ", 1)[0]
    assert "with enable_sequential_cpu_offload: sequential offload moves weights inside the compiled graph" in (
        compile_section
    )


def test_each_feature_says_what_it_reaches_and_what_a_second_denoiser_gets():
    page = features_page()

    def reaches(name: str) -> str:
        section = page.split(f"## `{name}`\n", 1)[1].split("\n## ", 1)[0]
        return section.split("| reaches | ", 1)[1].split(" |\n", 1)[0]

    assert reaches("compile") == "every denoiser"
    assert reaches("cache_dit") == "every denoiser"
    assert reaches("context_parallel") == "every denoiser"
    assert reaches("tensor_parallel") == "every denoiser"
    assert reaches("tea_cache") == "every denoiser"
    assert reaches("vae_use_tiling") == "pipeline"
    assert reaches("quantization").startswith("the denoisers its options name (refused while a denoiser is left out;")


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """The example plugin registered as from an entry point; unregistered afterwards."""
    monkeypatch.syspath_prepend(str(ROOT / "tests" / "example_plugin"))
    from omni_accel_example import TransformerCallCounter

    feature = FEATURES.register(TransformerCallCounter(), "entry point 'transformer_call_counter' (example)")
    yield feature
    FEATURES.unregister(feature.name)


def test_plugin_features_are_listed_with_their_source_only_when_asked(plugin):
    assert f"## `{plugin.name}`" not in features_page()  # the committed page: built-ins only
    page = features_page(plugins=True)
    section = page.split(f"## `{plugin.name}`\n", 1)[1].split("\n## ", 1)[0]
    assert "| registered by | entry point 'transformer_call_counter' (example) |" in section
    for option in plugin.config_cls.model_fields:
        assert f"| `{option}` |" in section


def test_the_cli_page_lists_every_command_and_option():
    import typer.main

    from accel.cli import app

    page = cli_page()
    root = typer.main.get_command(app)
    for name, command in root.commands.items():
        assert f"## `omni-accel {name}`" in page
        for param in getattr(command, "params", []):
            if param.param_type_name == "option" and param.name != "help":
                assert f"`{param.opts[0]}`" in page.split(f"## `omni-accel {name}`", 1)[1], (name, param.opts)


def test_the_module_map_has_every_module_and_each_has_a_docstring():
    page = modules_page()
    for path in (ROOT / "accel").rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        assert f"| `{name}` |" in page
    assert "(no docstring)" not in page
