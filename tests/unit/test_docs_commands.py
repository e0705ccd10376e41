"""The command pages in docs/commands/ are generated from the Typer app: regenerated in memory they must
equal the files on disk, so a page and `tritonpkg <command> --help` cannot drift apart
(fix: `.venv/bin/python scripts/gen_docs.py`)."""

from __future__ import annotations

from pathlib import Path

import typer.main
from typer.testing import CliRunner

from tritonpkg.cli import app
from tritonpkg.devtools.cli_docs import HEADER, render_pages

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_command_pages_match_the_typer_app() -> None:
    pages = render_pages()
    stale = [rel for rel, text in pages.items()
             if not (DOCS / rel).exists() or (DOCS / rel).read_text(encoding="utf-8") != text]
    assert not stale, f"regenerate with `.venv/bin/python scripts/gen_docs.py`: {stale}"
    generated = {p.relative_to(DOCS).as_posix() for p in (DOCS / "commands").glob("*.md")
                 if p.read_text(encoding="utf-8").startswith(HEADER)}
    assert generated == set(pages), "a generated page on disk has no command any more"


def test_every_command_and_option_has_its_page() -> None:
    """Each command of the click tree, and each of its options as `--help` prints it, is on a page."""
    pages = render_pages()
    root = typer.main.get_command(app)
    runner = CliRunner()
    for name, cmd in root.commands.items():  # type: ignore[attr-defined]
        page = pages[f"commands/{name}.md"]
        subs = list(getattr(cmd, "commands", {}).items()) or [(None, cmd)]
        for sub_name, sub in subs:
            args = [name] + ([sub_name] if sub_name else [])
            if sub_name:
                assert f"`tritonpkg {name} {sub_name}`" in page
            helped = runner.invoke(app, [*args, "--help"], env={"COLUMNS": "200"})
            assert helped.exit_code == 0, helped.output
            for param in sub.params:
                for opt in param.opts:
                    if opt.startswith("-"):
                        assert opt in page, f"{opt} of tritonpkg {' '.join(args)} missing from its page"
                        assert opt in helped.output, f"{opt} of tritonpkg {' '.join(args)} missing from --help"


def test_a_changed_help_text_changes_the_page(monkeypatch) -> None:
    """The generator reads the live app: a help text edited in the CLI shows up in the rendered page."""
    root = typer.main.get_command(app)
    import tritonpkg.devtools.cli_docs as cli_docs

    schema = root.commands["schema"]  # type: ignore[attr-defined]
    monkeypatch.setattr(schema, "help", "A help text that no page has.")
    monkeypatch.setattr(cli_docs, "_root", lambda: root)
    assert "A help text that no page has." in cli_docs.render_pages()["commands/schema.md"]
