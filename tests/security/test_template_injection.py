"""Code injection through template values (issue 23, item 2): a value that reaches a rendered model.py
cannot add a statement. Every template is rendered with hostile values in every slot (also values the
parameter types refuse, so the escaping is proved on its own), and its AST must have exactly the
statements of a clean render while each value comes back, equal, as a literal. Then the hole end to end:
a spec with a breakout value is refused at package time, nothing is written and nothing runs; and
validate flags a model.py someone edited code into."""

from __future__ import annotations

import ast
import contextlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.paths import EXAMPLES
from tritonpkg import template_params
from tritonpkg.errors import SpecError
from tritonpkg.repository import package_spec, templates
from tritonpkg.spec import load_spec

MARK = "INJECTED_MARK"
HOSTILE = [
    '"""', "'''", "\\", "a\nb", "\r\n", "{{ 7 * 7 }}", "{% raw %}", "\u2028", "\u2029", "\x00", "\ud800",
    "\u202e", "# not a comment\n",
    f'x"""\nopen("{MARK}", "w")\n"""',
    f"x'''\nopen('{MARK}', 'w')\n'''",
    f'\\"""\nimport os; os.system("touch {MARK}")\n#',
]
PY_TEMPLATES = [n for n in templates.available() if any(s.name.endswith(".py.j2") for s in templates.load(n).sources())]


def literal_leaves(source: str) -> list:
    """Every leaf value (and mapping key) of the top-level `NAME = <literal>` assignments."""
    out: list = []

    def walk(value) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(k), walk(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v)
        else:
            out.append(value)

    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign):
            with contextlib.suppress(ValueError):
                walk(ast.literal_eval(node.value))
    return out


def context(template: templates.Template, value=None, only: str | None = None) -> dict:
    """The sample context, with `value` in every string slot (name, weights, tensor names, every parameter)
    or, given `only`, in that one slot."""
    ctx = templates.sample_context(template)
    if value is None:
        return ctx
    slots = ["name", "weights", "tensor", *[f"params.{k}" for k in ctx["params"]]]
    for slot in [only] if only else slots:
        if slot.startswith("params."):
            ctx["params"][slot.removeprefix("params.")] = value
        elif slot == "tensor":
            ctx["inputs"] = [{**ctx["inputs"][0], "name": value}]
            ctx["outputs"] = [{**ctx["outputs"][0], "name": value}]
        else:
            ctx[slot] = value
    return ctx


def rendered(template: templates.Template, ctx: dict) -> dict[str, str]:
    return {k: v.decode() for k, v in templates.render(template, ctx).items()}


def test_every_template_with_python_code_is_covered():
    assert set(PY_TEMPLATES) >= {"custom", "tokenizer", "embedding", "scoring"}


@pytest.mark.parametrize("name", PY_TEMPLATES)
@pytest.mark.parametrize("value", HOSTILE, ids=[ascii(v)[:24] for v in HOSTILE])
def test_hostile_values_in_every_slot_add_no_statement(name, value):
    template = templates.load(name)
    clean = rendered(template, context(template))
    hostile = rendered(template, context(template, value))
    for filename, text in hostile.items():
        if filename.endswith(".py"):
            assert text.isascii()  # ascii(): no raw line separators, bidi controls or surrogates in the file
            assert templates.code_shape(text) == templates.code_shape(clean[filename]), filename
            assert value in literal_leaves(text)
            assert value not in literal_leaves(clean[filename])
        elif filename.endswith(".json"):
            data = json.loads(text)
            assert data["model"] == value and data["weights"] == value


@pytest.mark.parametrize("name", PY_TEMPLATES)
def test_each_value_comes_back_as_the_literal_it_was(name):
    """Slot by slot: the hostile value is in the module as a constant equal to it, and nowhere else did
    the module change shape."""
    template = templates.load(name)
    clean = rendered(template, context(template))["model.py"]
    slots = ["name", "weights", "tensor", *[f"params.{k}" for k in template.parameters]]
    for slot in slots:
        if rendered(template, context(template, "probe", only=slot))["model.py"] == clean:
            continue  # a slot this template's model.py does not use (custom has no weights)
        for value in HOSTILE:
            text = rendered(template, context(template, value, only=slot))["model.py"]
            assert templates.code_shape(text) == templates.code_shape(clean), (slot, value)
            assert value in literal_leaves(text), (slot, value)


def test_pyliteral_is_the_only_way_into_generated_python(tmp_path):
    """A `.py` template that outputs a value without the filter does not render at all."""
    (tmp_path / "model.py.j2").write_text("X = {{ name }}\n")
    raw = templates.Template("raw", tmp_path, {})
    with pytest.raises(SpecError, match=r"without \| pyliteral"):
        templates.render(raw, {"name": "m"})
    (tmp_path / "model.py.j2").write_text("X = {{ name | pyliteral }}\n")
    assert templates.render(raw, {"name": '"""'}) == {"model.py": b"X = '\"\"\"'\n"}
    for bad in (float("nan"), float("inf"), b"bytes", {1: "non-string key"}, object()):
        with pytest.raises(SpecError):
            templates.pyliteral(bad)
    deep: list = []
    for _ in range(100):
        deep = [deep]
    with pytest.raises(SpecError, match="nested deeper"):
        templates.pyliteral(deep)


@pytest.mark.parametrize("name", list(templates.available()))
def test_declared_types_refuse_hostile_values(name):
    """Every parameter is typed; only a `path` (read at package time, never rendered) takes free text."""
    template = templates.load(name)
    for key, decl in template.parameters.items():
        assert decl.get("type") in template_params._TYPES, (name, key)
        for value in HOSTILE:
            if decl["type"] in ("path", "string") and "\x00" not in value and "\n" not in value \
                    and "\r" not in value:
                continue
            with pytest.raises(SpecError) as err:
                templates.resolve_parameters(template, {**_required(template), key: value}, Path("spec.yaml"))
            assert err.value.field == f"python.parameters.{key}" and err.value.file == "spec.yaml"
            assert err.value.expected and len(str(err.value)) < 400


def _required(template: templates.Template) -> dict:
    good = {"python_file": "hooks.py", "path": "tok", "identifier": "f"}
    return {k: good[d["type"]] for k, d in template.parameters.items() if d.get("required")}


@pytest.mark.parametrize(("key", "value", "ok"), [
    ("module", "hooks.py", True), ("module", "pkg.hooks.py", True), ("module", "hooks", False),
    ("module", "../hooks.py", False), ("module", "import.py", False), ("module", "a b.py", False),
    ("preprocess", "pre", True), ("preprocess", None, True), ("preprocess", "a.b", False),
    ("preprocess", "class", False), ("preprocess", "f()", False), ("model", "", False),
    ("factory", True, True), ("factory", "true", False), ("factory", 1, False),
    ("tokenizer", "../tok", True), ("tokenizer", "t" * 300, False), ("tokenizer", "a/" * 3000, False),
])
def test_identifiers_and_module_files_are_checked_as_such(key, value, ok):
    custom = templates.load("ensemble" if key == "tokenizer" else "custom")
    params = {"module": "hooks.py", **({"tokenizer": "tok"} if key == "tokenizer" else {}), key: value}
    if ok:
        assert templates.resolve_parameters(custom, params, None)[key] == value
    else:
        with pytest.raises(SpecError, match="is not allowed") as err:
            templates.resolve_parameters(custom, params, None)
        assert err.value.field == f"python.parameters.{key}"


@pytest.mark.parametrize("value", [-1, 0, True, 1.5, "512", 2**63, [1]])
def test_integer_parameters_are_integers_in_range(value):
    embedding = templates.load("embedding")
    with pytest.raises(SpecError, match="is not allowed") as err:
        templates.resolve_parameters(embedding, {"token_budget": value}, None)
    assert err.value.field == "python.parameters.token_budget" and "integer >= 1" in err.value.expected
    with pytest.raises(SpecError) as err:
        templates.resolve_parameters(embedding, {"matryoshka_dimensions": [128, "x"]}, None)
    assert err.value.field == "python.parameters.matryoshka_dimensions[1]"


def _files_under(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


def _custom_spec(**params) -> dict:
    return {
        "name": "double", "version": 1, "kind": "python",
        "python": {"template": "custom", "parameters": {"module": "hooks.py", **params}, "files": ["hooks.py"],
                   "inputs": [{"name": "X", "data_type": "FP32", "dims": [4]}],
                   "outputs": [{"name": "Y", "data_type": "FP32", "dims": [4]}]},
    }


HOOKS = "def model(inputs):\n    return {'Y': inputs['X'] * 2}\n\ndef f(x):\n    return x\n"
BREAKOUT = f'f"""\nopen("{MARK}", "w")\n"""'


@pytest.mark.parametrize("key", ["preprocess", "postprocess", "model", "module"])
def test_a_breakout_value_in_the_custom_template_is_refused_and_nothing_is_written(key, write_spec, tmp_path,
                                                                                    monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = write_spec(_custom_spec(**{key: BREAKOUT}), extra_files={"hooks.py": HOOKS})
    before = _files_under(tmp_path)
    with pytest.raises(SpecError, match="is not allowed") as err:
        package_spec(load_spec(spec), tmp_path / "repo")
    assert err.value.field == f"python.parameters.{key}" and err.value.file.startswith(f"{spec}:")  # file:line
    assert _files_under(tmp_path) == before  # no repository, no staging, no marker


def test_a_breakout_token_budget_is_refused(write_spec, tmp_path, monkeypatch):
    """The reported hole: `token_budget` went raw into the docstring and was not type-checked."""
    import yaml

    monkeypatch.chdir(tmp_path)
    data = yaml.safe_load((EXAMPLES / "minilm-embeddings-template" / "tritonpkg.yaml").read_text())
    data["python"]["parameters"]["token_budget"] = f'1 tokens"""\nopen("{MARK}", "w")\n"""'
    before = _files_under(tmp_path)
    with pytest.raises(SpecError, match="is not allowed") as err:
        package_spec(load_spec(write_spec(data)), tmp_path / "repo")
    assert err.value.field == "python.parameters.token_budget" and err.value.expected == "an integer >= 1"
    assert _files_under(tmp_path) - before == {"spec", "spec/tritonpkg.yaml"}


STUB = "def __getattr__(name):\n    return None\n"


def test_free_text_that_is_rendered_stays_a_string_when_triton_imports_the_model(write_spec, tmp_path):
    """`weights` is free text (a path) that does reach model.py: it is packaged, and importing the model
    as the stub does runs no injected code and sees the path unchanged."""
    import yaml

    data = yaml.safe_load((EXAMPLES / "minilm-embeddings-template" / "tritonpkg.yaml").read_text())
    weights = str(tmp_path / f'w"""; open("{MARK}", "w"); """\u2028\u2029\\\'\'\'{{{{ x }}}}')
    data["weights"] = weights
    spec = load_spec(write_spec(data))
    package_spec(spec, tmp_path / "repo")
    model_py = tmp_path / "repo" / data["name"] / "1" / "model.py"
    (tmp_path / "stub").mkdir()
    (tmp_path / "stub" / "triton_python_backend_utils.py").write_text(STUB)
    probe = textwrap.dedent(f"""
        import runpy, sys
        sys.path.insert(0, {str(tmp_path / 'stub')!r})
        print(repr(runpy.run_path({str(model_py)!r})["SETTINGS"]["weights"]))
    """)
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                         check=False)
    assert out.returncode == 0, out.stderr
    assert ast.literal_eval(out.stdout.strip()) == spec.weights_location() == str(Path(weights).resolve())
    assert not list(tmp_path.rglob(MARK))


def test_validate_flags_code_added_to_a_rendered_model(write_spec, tmp_path):
    from tritonpkg.validate import validate_repository

    spec = load_spec(write_spec(_custom_spec(preprocess="f"), extra_files={"hooks.py": HOOKS}))
    package_spec(spec, tmp_path / "repo")
    assert [p for p in validate_repository(tmp_path / "repo").problems if p.rule == "template.code"] == []

    model_py = tmp_path / "repo" / "double" / "1" / "model.py"
    text = model_py.read_text()
    model_py.write_text(text.replace("MODEL_ATTR = 'model'", "MODEL_ATTR = 'other'"))  # a value: drift only
    problems = validate_repository(tmp_path / "repo").problems
    assert [p.rule for p in problems if p.file == "double/1/model.py"] == ["lock.drift"]

    lines = text.splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.startswith("HOOK_FILE"))
    lines.insert(at, f'open("{MARK}", "w")\n')
    model_py.write_text("".join(lines))
    found = [p for p in validate_repository(tmp_path / "repo").problems if p.rule == "template.code"]
    assert [(p.severity, p.file, p.line, p.model) for p in found] == [("error", "double/1/model.py", at + 1, "double")]
    assert "'custom' template" in found[0].message

    lock_path = tmp_path / "repo" / "tritonpkg.lock.json"  # rendered by another template's sources: not compared
    lock = json.loads(lock_path.read_text())
    lock["models"]["double"]["versions"]["1"]["template_sha256"] = "0" * 64
    lock_path.write_text(json.dumps(lock))
    assert [p for p in validate_repository(tmp_path / "repo").problems if p.rule == "template.code"] == []


def test_the_hook_module_must_be_one_of_the_packaged_files(write_spec, tmp_path):
    spec = write_spec(_custom_spec(module="other.py"), extra_files={"hooks.py": HOOKS})
    with pytest.raises(SpecError, match=r"'other.py' is not one of the python.files") as err:
        package_spec(load_spec(spec), tmp_path / "repo")
    assert err.value.field == "python.parameters.module" and "hooks.py" in err.value.expected
    assert not (tmp_path / "repo").exists()
    with pytest.raises(SpecError, match=r"'model.py' is not one of the python.files"):
        package_spec(load_spec(write_spec(_custom_spec(module="model.py"), folder="self",
                                          extra_files={"hooks.py": HOOKS})), tmp_path / "repo")


def test_a_template_outside_templates_is_unknown_and_never_rendered(write_spec, tmp_path, monkeypatch):
    """A template is Jinja2 the packager runs: `template: ../../<spec folder>` would have run the spec's own
    template.yaml + model.py.j2 (Jinja2 reaches os through any callable's globals)."""
    from tritonpkg import paths

    monkeypatch.chdir(tmp_path)
    data = _custom_spec()
    spec = write_spec(data, extra_files={
        "hooks.py": HOOKS, "template.yaml": "parameters: {module: {type: python_file, required: true}}\n",
        "model.py.j2": "{{ cycler.__init__.__globals__.os.system('touch " + MARK + "') }}\n"})
    rel = Path("..")
    for _ in paths.templates_dir().resolve().parts[1:]:
        rel = rel / ".."
    escape = str(rel / spec.parent.resolve().relative_to("/"))
    assert (paths.templates_dir() / escape / "template.yaml").is_file()
    with pytest.raises(SpecError, match="unknown template") as err:
        templates.load(escape)
    assert err.value.field == "python.template" and "custom" in err.value.expected
    data["python"]["template"] = escape
    spec.write_text(__import__("yaml").safe_dump(data))
    with pytest.raises(SpecError, match=r"python.template: (unknown template|String should have at most 64)"):
        package_spec(load_spec(spec), tmp_path / "repo")
    assert not list(tmp_path.rglob(MARK)) and not (tmp_path / "repo").exists()
