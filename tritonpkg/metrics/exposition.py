"""Pure text work on the Prometheus text exposition format (0.0.4): split a scrape into metric families
and merge several scrapes so that every family appears once. Kept at the text level so Triton's output
reaches Prometheus byte for byte, as Triton wrote it."""

from __future__ import annotations

from dataclasses import dataclass, field


def _sample_name(line: str) -> str:
    end = len(line)
    for stop in ("{", " ", "\t"):
        i = line.find(stop)
        if i != -1:
            end = min(end, i)
    return line[:end]


def family_blocks(text: str) -> dict[str, list[str]]:
    """Family name (as its `# TYPE` line spells it, or the sample name when untyped) -> its lines.
    A family split into two blocks in one scrape is joined; other comments are dropped."""
    blocks: dict[str, list[str]] = {}
    current: str | None = None
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split(maxsplit=3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                name = parts[2]
                lines = blocks.setdefault(name, [])
                if not any(existing.split(maxsplit=2)[:2] == parts[:2]
                           for existing in lines if existing.startswith("#")):
                    lines.append(line)
                current = name
            continue
        name = _sample_name(line)
        if current is None or not name.startswith(current):
            current = name
        blocks.setdefault(current, []).append(line)
    return blocks


@dataclass
class MergedExposition:
    text: str
    families: dict[str, str] = field(default_factory=dict)  # family -> the source it came from
    dropped: list[tuple[str, str]] = field(default_factory=list)  # (source, family) seen again later


def merge_expositions(sources: list[tuple[str, str]]) -> MergedExposition:
    """`sources` is [(source name, scrape text)] in priority order; a family already given by an
    earlier source is dropped from later ones (and reported in `dropped`)."""
    merged: dict[str, list[str]] = {}
    result = MergedExposition(text="")
    for source, text in sources:
        for name, lines in family_blocks(text).items():
            if name in merged:
                result.dropped.append((source, name))
                continue
            merged[name] = lines
            result.families[name] = source
    result.text = "".join("\n".join(lines) + "\n" for lines in merged.values())
    return result
