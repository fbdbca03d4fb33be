"""A benchmark's run folder: what was asked (config.json), what each rank measured (records-<rank>.jsonl,
one JSON line per finished record) and the merged result (summary.json).

A record is keyed by (method spec, prompt, seed, model, schema): a rerun of the same command skips
the keys already present, so a killed or pre-empted job continues where it stopped, and a folder
that holds another configuration is refused before any work. Each line is appended whole and
flushed to disk before the next record starts; a line cut short by a kill is ignored when read and
trimmed before its file grows again. Knows nothing of models or methods.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

SCHEMA = "mulo-bench/2"
CONFIG, SUMMARY = "config.json", "summary.json"


class RunFolderError(ValueError):
    """A folder that holds another configuration, or a file in it that cannot be read."""


def record_key(r: dict) -> tuple:
    return r["spec"], r["prompt"], r["seed"], r["model"], r["schema"]


def write_atomic(path: Path, text: str) -> None:
    """Readers see the old file or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _differences(old, new, where: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        return [d for k in dict.fromkeys([*old, *new])
                for d in _differences(old.get(k), new.get(k), f"{where}{k}.")]
    return [] if old == new else [f"{where.rstrip('.') or 'config'}: {old!r} there, {new!r} now"]


def _without(old, removed):
    """old without the keys of `removed` (a nested dict; its leaves' values are not read)."""
    if not (isinstance(old, dict) and isinstance(removed, dict)):
        return old
    return {k: (_without(v, removed[k]) if isinstance(removed.get(k), dict) else v) for k, v in old.items()
            if not (k in removed and not isinstance(removed[k], dict))}


def _with_added(old, added):
    """old with every key of `added` (a nested dict) that old lacks filled in from it: a knob the code gained
    after the folder was written, at the value every run had before it existed."""
    if not (isinstance(old, dict) and isinstance(added, dict)):
        return old
    out = dict(old)
    for k, v in added.items():
        out[k] = _with_added(old[k], v) if k in old else v
    return out


class RunFolder:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._offsets: dict[Path, int] = {}
        self._records: dict[tuple, dict] = {}
        self._out = None

    def claim(self, config: dict, write: bool = True, added: dict | None = None, removed: dict | None = None) -> None:
        """Check that the folder holds this configuration; a new folder gets it (when `write`). `added`
        (nested like config): the value a field the folder's config lacks is taken to have had (a knob
        added since, at the value that reproduces what ran before it); `removed`: fields left out of the
        comparison on both sides (a knob none of the records read, or one removed since)."""
        config = json.loads(json.dumps(config))  # the form it takes on disk
        f = self.path / CONFIG
        if f.exists():
            try:
                old = json.loads(f.read_text())
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise RunFolderError(f"{f} is not valid JSON ({e}); remove the folder or choose another --out")
            diff = _differences(_without(_with_added(old, added), removed), _without(config, removed))
            if diff:
                raise RunFolderError(f"{self.path} holds a run of another configuration ({'; '.join(diff)}); "
                                     f"rerun the command that started it to resume, or choose another --out")
        elif write:
            self.path.mkdir(parents=True, exist_ok=True)
            write_atomic(f, json.dumps(config, indent=2))
        else:
            raise RunFolderError(f"{f} is missing; rank 0 writes it before the other ranks start")

    def records(self) -> dict[tuple, dict]:
        """Every complete record in the folder's record files, by key (the first of duplicates), without
        its tokens."""
        for f in sorted(self.path.glob("records-*.jsonl")):
            start = self._offsets.get(f, 0)
            with open(f, "rb") as fh:
                fh.seek(start)
                chunk = fh.read()
            end = chunk.rfind(b"\n") + 1  # a line still being written (or cut by a kill) waits
            for n, line in enumerate(chunk[:end].splitlines()):
                if not line.strip():
                    continue
                try:
                    r = json.loads(line)
                    r.pop("tokens", None)  # the file keeps them; a merge of many records needs only figures
                    self._records.setdefault(record_key(r), r)
                except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError):
                    raise RunFolderError(f"{f}: a record after byte {start} (line {n + 1} of the new part) is "
                                         f"not a benchmark record") from None
            self._offsets[f] = start + end
        return self._records

    def append(self, record: dict, rank: int) -> None:
        """Append one record to this rank's file and flush it to disk."""
        if self._out is None:
            f = self.path / f"records-{rank}.jsonl"
            if f.exists():  # trim a line a kill cut short, so the next line starts on its own
                data = f.read_bytes()
                if data and not data.endswith(b"\n"):
                    os.truncate(f, data.rfind(b"\n") + 1)
            self._out = open(f, "ab")
        self._out.write((json.dumps(record) + "\n").encode())
        self._out.flush()
        os.fsync(self._out.fileno())

    def write_summary(self, result: dict) -> Path:
        f = self.path / SUMMARY
        write_atomic(f, json.dumps(result, indent=2))
        return f

    def close(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None
