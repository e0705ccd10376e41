"""Line/column of every field in a config.pbtxt that parsed.

Python's protobuf has no ParseInfoTree, so this is a light scan of the text-format tokens. Paths
use the names of the ModelConfig schema: `input[1].dims`, `instance_group[0].kind`,
`ensemble_scheduling.step[0].input_map[A_IN]` (map entries by key)."""

from __future__ import annotations

import contextlib
import re

from google.protobuf.descriptor import Descriptor, FieldDescriptor

_TOKEN = re.compile(
    r'\s+|#[^\n]*|(?P<str>"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\')|(?P<word>[A-Za-z0-9_.+\-]+)|(?P<punct>[{}\[\]<>:,;])'
)
Location = tuple[int, int]


def _tokens(text: str) -> list[tuple[str, int, int]]:
    out: list[tuple[str, int, int]] = []
    line, line_start = 1, 0
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:  # an odd character: skip it, the parser reports it
            pos += 1
            continue
        tok = m.group(0)
        if m.lastgroup:
            out.append((tok, line, m.start() - line_start + 1))
        nl = tok.count("\n")
        if nl:
            line += nl
            line_start = m.start() + tok.rfind("\n") + 1
        pos = m.end()
    return out


def _unquote(tok: str) -> str:
    return tok[1:-1] if tok[:1] in "\"'" else tok


def _repeated(f: FieldDescriptor | None) -> bool:
    if f is None:
        return False
    flag = getattr(f, "is_repeated", None)
    if flag is not None:
        return bool(flag)
    # protobuf releases before `is_repeated` only have `label`
    return getattr(f, "label", None) == FieldDescriptor.LABEL_REPEATED


class _Scanner:
    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.i = 0
        self.locs: dict[str, Location] = {}

    def peek(self) -> str | None:
        return self.toks[self.i][0] if self.i < len(self.toks) else None

    def take(self) -> tuple[str, int, int]:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def message(self, desc: Descriptor | None, prefix: str, close: str | None) -> dict[str, str]:
        counts: dict[str, int] = {}
        scalars: dict[str, str] = {}
        while self.peek() is not None and self.peek() != close:
            name, line, col = self.take()
            if name in ",;":
                continue
            field = desc.fields_by_name.get(name) if desc is not None else None
            sub = field.message_type if field is not None and field.message_type is not None else None
            self.locs.setdefault(prefix + name, (line, col))
            if self.peek() == ":":
                self.take()
            if self.peek() == "[":
                self.take()
                while self.peek() not in (None, "]"):
                    if self.peek() == ",":
                        self.take()
                        continue
                    self._value(field, sub, prefix, name, counts, scalars)
                if self.peek() == "]":
                    self.take()
            else:
                self._value(field, sub, prefix, name, counts, scalars)
        if self.peek() == close and close is not None:
            self.take()
        return scalars

    def _value(self, field, sub, prefix, name, counts, scalars) -> None:
        tok, line, col = self.toks[self.i]
        idx = counts.get(name, 0)
        counts[name] = idx + 1
        path = f"{prefix}{name}[{idx}]" if _repeated(field) else prefix + name
        self.locs.setdefault(path, (line, col))
        if tok in ("{", "<"):
            self.take()
            inner = self.message(sub, path + ".", "}" if tok == "{" else ">")
            if sub is not None and sub.GetOptions().map_entry and "key" in inner:
                self.locs.setdefault(f"{prefix}{name}[{inner['key']}]", (line, col))
            return
        self.take()
        value = _unquote(tok)
        while (nxt := self.peek()) is not None and nxt[:1] in "\"'":  # adjacent strings concatenate
            value += _unquote(self.take()[0])
        scalars[name] = value


def field_locations(text: str, descriptor: Descriptor | None) -> dict[str, Location]:
    """Map field path -> (line, column), both 1-based."""
    scanner = _Scanner(text)
    with contextlib.suppress(IndexError):  # truncated text: keep what was found
        scanner.message(descriptor, "", None)
    return scanner.locs


def lookup(locs: dict[str, Location], path: str | None) -> Location | None:
    """The location of `path`, or of its nearest ancestor that was written in the file."""
    while path:
        if path in locs:
            return locs[path]
        cut = max(path.rfind("."), path.rfind("["))
        if cut <= 0:
            break
        path = path[:cut]
    return None
