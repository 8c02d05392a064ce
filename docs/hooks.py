"""mkdocs hook: the generated parts of the reference.

A page asks for a generated part with an HTML comment on a line of its own:

    <!-- gen:options chkpt-delta sink -->    the options table of a format
    <!-- gen:arguments DeltaUpsert -->        keyword arguments of a class
    <!-- gen:cli -->                          every command's --help (not used by a page:
                                              docs/reference/cli.md holds the text,
                                              written by ``python docs/hooks.py --write-cli``)
    <!-- gen:api -->                          the Python API (mkdocstrings)

Names, types and defaults come from the code (what ``docs/gen_ref.py`` points at): a
default is what ``from_options`` returns given only the required options. Descriptions
come from ``docs/reference/options.yml``. Any mismatch between the two raises, which
fails ``mkdocs build`` (and so ``make docs`` and CI).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import inspect
import io
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml
from mkdocs.exceptions import PluginError

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_ref  # docs/ is not a package: found through sys.path

MARKER = re.compile(r"^<!-- gen:(\w+)\s*(.*?)\s*-->$", re.MULTILINE)
DESCRIPTIONS = Path(__file__).resolve().parent / "reference" / "options.yml"


def load(target: str) -> Any:
    module, _, attribute = target.partition(":")
    try:
        value: Any = importlib.import_module(module)
        for part in attribute.split(".") if attribute else ():
            value = getattr(value, part)
    except (ImportError, AttributeError) as e:
        raise PluginError(f"docs/gen_ref.py names {target!r}, which cannot be loaded: {e}") from e
    return value


def descriptions(section: str) -> dict[str, str]:
    doc = yaml.safe_load(DESCRIPTIONS.read_text())
    if section not in doc:
        raise PluginError(f"{DESCRIPTIONS.name} has no section {section!r}")
    return {str(k): str(v) for k, v in doc[section].items()}


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def show_default(value: Any, field: str) -> str:
    if value is None:
        return "not set"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if hasattr(value, "describe"):
        return f"`{value.describe()}`"
    if isinstance(value, Mapping):
        return ", ".join(f"`{k}={v}`" for k, v in value.items()) if value else "none"
    if isinstance(value, int) and field.endswith("_ms"):
        return f"`{value}` ms"
    if isinstance(value, int) and field.endswith("_bytes"):
        return f"`{value}` ({value / 1024**2:g} MiB)"
    if isinstance(value, tuple):
        return ", ".join(f"`{v}`" for v in value) if value else "none"
    return f"`{value}`"


def options_table(ref: gen_ref.OptionsRef) -> str:
    cls = load(ref.config)
    known = {str(k).lower() for k in load(ref.known)}
    text = descriptions(ref.key)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    by_lower = {name.lower(): name for name in text}
    missing = sorted(k for k in known if k not in by_lower)
    if missing:
        raise PluginError(
            f"{ref.config} accepts option(s) {missing} that {DESCRIPTIONS.name} "
            f"[{ref.key}] does not describe"
        )
    try:
        config = cls.from_options(dict(ref.required), **ref.parse_kwargs)
    except Exception as e:
        raise PluginError(f"{ref.config}.from_options({ref.required}) failed: {e}") from e
    rows, seen_fields = [], set()
    for name, meaning in text.items():
        prefixed = any(name.startswith(p) for p in ref.prefixes)
        if name.lower() not in known and not prefixed:
            raise PluginError(
                f"{DESCRIPTIONS.name} [{ref.key}] describes {name!r}, which {ref.config} "
                "does not accept"
            )
        field = ref.fields.get(name, _snake(name))
        # "timing.timeout_ms": a field of the dataclass held in a field of the config
        top, _, sub = (field or "").partition(".")
        if field is not None and top not in fields:
            raise PluginError(
                f"option {name!r} of {ref.key}: {ref.config} has no field {top!r} "
                "(fix docs/gen_ref.py)"
            )
        held = fields
        if sub:
            held = {f.name: f for f in dataclasses.fields(getattr(config, top))}
            if sub not in held:
                raise PluginError(
                    f"option {name!r} of {ref.key}: {ref.config}.{top} has no field {sub!r} "
                    "(fix docs/gen_ref.py)"
                )
        if name in ref.required:
            default = "**required**"
        elif field is None:
            default = "—"
        elif field in seen_fields:
            default = "not set"
        else:
            value = getattr(getattr(config, top), sub) if sub else getattr(config, top)
            default = show_default(value, field)
        parsed = "" if field is None else f"<br><small>parsed as `{held[sub or top].type}`</small>"
        if field is not None:
            seen_fields.add(field)
        rows.append(f"| `{name}` | {default} | {cell(meaning)}{parsed} |")
    head = "| option | default | meaning |\n|---|---|---|\n"
    source = f"<small>Generated from `{ref.config.replace(':', '.')}`.</small>"
    return reference_table(head + "\n".join(rows), source)


def reference_table(table: str, note: str) -> str:
    """A generated table, in a block the stylesheet keeps option names unbroken in."""
    return f'<div class="chkpt-ref" markdown>\n\n{table}\n\n{note}\n\n</div>\n'


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def arguments_table(name: str) -> str:
    target = gen_ref.ARGUMENTS[name]
    signature = inspect.signature(load(target))
    text = descriptions(name)
    params = [p for p in signature.parameters.values() if p.name != "self"]
    undocumented = [p.name for p in params if p.name not in text]
    stale = [n for n in text if n not in signature.parameters]
    if undocumented or stale:
        raise PluginError(
            f"{target}: arguments without a description {undocumented}, descriptions of "
            f"arguments it does not take {stale} ({DESCRIPTIONS.name} [{name}])"
        )
    rows = []
    for p in params:
        default = "**required**" if p.default is inspect.Parameter.empty else f"`{p.default!r}`"
        kind = f"<br><small>type `{p.annotation}`</small>"
        rows.append(f"| `{p.name}` | {default} | {cell(text[p.name])}{kind} |")
    head = "| argument | default | meaning |\n|---|---|---|\n"
    note = f"<small>Generated from `{target.replace(':', '.')}`.</small>"
    return reference_table(head + "\n".join(rows), note)


class _Captured(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser


@contextlib.contextmanager
def _capturing() -> Iterator[None]:
    original = argparse.ArgumentParser.parse_args

    def capture(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        raise _Captured(self)

    argparse.ArgumentParser.parse_args = capture  # type: ignore[method-assign]
    try:
        yield
    finally:
        argparse.ArgumentParser.parse_args = original  # type: ignore[method-assign]


def parser_of(main: Callable[..., Any]) -> argparse.ArgumentParser:
    """The argparse parser ``main(argv)`` builds, taken at its ``parse_args`` call."""
    with _capturing(), contextlib.redirect_stdout(io.StringIO()):
        try:
            main([])
        except _Captured as captured:
            return captured.parser
    raise PluginError(f"{main.__module__}.{main.__name__} did not call parse_args")


def _commands(
    parser: argparse.ArgumentParser, path: str
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, f"{path} {name}")


def cli_reference() -> str:
    os.environ["COLUMNS"] = "86"  # argparse wraps to this width: the code block's, at 1280 px
    out = []
    for program, target in gen_ref.CLI.items():
        parser = parser_of(load(target))
        parser.prog = program
        programs = _programs() if program == "spark-chkpt" else {}
        for path, sub in _commands(parser, program):
            name = path.split(" ", 1)[1] if " " in path else None
            if name in programs:
                sub = parser_of(programs[name])
                sub.prog = path
            level = "##" if path == program else "###"
            out.append(f"{level} `{path}`\n\n```text\n{sub.format_help().rstrip()}\n```\n")
    return "\n".join(out)


def _programs() -> dict[str, Callable[..., Any]]:
    """The programs ``spark-chkpt`` dispatches to (entry points ``spark_chkpt.programs``)."""
    found = load(gen_ref.PROGRAMS)()
    loader = load(gen_ref.PROGRAM_LOADER)  # the benchmark loads from the checkout only
    loaded = {name: loader(ep) for name, ep in found.items()}
    return {name: program for name, program in loaded.items() if program is not None}


def api_reference() -> str:
    out = []
    for title, objects in gen_ref.API.items():
        out.append(f"## {title}\n")
        out.extend(f"::: {path}\n" for path in objects)
    return "\n".join(out)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    def render(match: re.Match[str]) -> str:
        kind, arg = match.group(1), match.group(2)
        if kind == "options":
            refs = {r.key: r for r in gen_ref.OPTIONS}
            if arg not in refs:
                raise PluginError(f"{page.file.src_path}: no options named {arg!r} in gen_ref")
            return options_table(refs[arg])
        if kind == "arguments":
            return arguments_table(arg)
        if kind == "cli":
            return cli_reference()
        if kind == "api":
            return api_reference()
        raise PluginError(f"{page.file.src_path}: unknown generated part {kind!r}")

    return MARKER.sub(render, markdown)


ROLE = re.compile(r":(?:class|mod|meth|func|attr|exc|data):(<code>)~?")


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    """Docstrings use Sphinx roles (``:class:`X```), which mkdocstrings leaves as text:
    keep the code, drop the role."""
    return ROLE.sub(r"\1", html)


CLI_PAGE = Path(__file__).resolve().parent / "reference" / "cli.md"
CLI_GENERATED = "<!-- generated: python docs/hooks.py --write-cli (tests/project/test_docs.py) -->"


def cli_page() -> str:
    """docs/reference/cli.md as it should read: its text up to the generated part's line,
    then every command's --help (so a reader of the repository finds the reference too)."""
    head = CLI_PAGE.read_text().split(CLI_GENERATED)[0]
    return f"{head}{CLI_GENERATED}\n\n{cli_reference()}"


if __name__ == "__main__":
    if sys.argv[1:] != ["--write-cli"]:
        sys.exit("usage: python docs/hooks.py --write-cli")
    CLI_PAGE.write_text(cli_page())
