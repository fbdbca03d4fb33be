"""Official files from the Hugging Face hub, into its cache, with progress; and whether we run on a Space.

Owns: the cache folder (HF_HUB_CACHE, else a Space's persistent storage /data when it is mounted,
else huggingface_hub's default), single-file and snapshot downloads that report (file, bytes done,
bytes total) to a callback, and the cache lookup that needs no network. It knows no model family:
callers name repositories and files. Offline (HF_HUB_OFFLINE=1 or no network) a download still
succeeds from the cache and fails otherwise; the caller turns that into its own message.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

Progress = Callable[[str, int, int], None]   # (file, bytes done, bytes total)
PERSISTENT = Path("/data")                   # a Space's persistent storage, when the Space has it


def on_space() -> bool:
    """True inside a Hugging Face Space (the platform sets SPACE_ID)."""
    return bool(os.environ.get("SPACE_ID"))


def cache_dir() -> Path | None:
    """Where downloads go: HF_HUB_CACHE when set, else on a Space with persistent storage
    /data/.huggingface/hub (kept across restarts), else None (huggingface_hub's default)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    if on_space() and not os.environ.get("HF_HOME") and PERSISTENT.is_dir() and os.access(PERSISTENT, os.W_OK):
        return PERSISTENT / ".huggingface" / "hub"
    return None


def _bar(report: Progress | None, label: str):
    """A tqdm class for huggingface_hub that also reports to `report`; None = the library's own bar."""
    if report is None:
        return None
    from tqdm.auto import tqdm

    class Reporting(tqdm):
        done = 0  # counted here: a bar the library disables counts nothing itself

        def update(self, n=1):
            self.done += n or 0
            report(label, int(self.done), int(self.total or 0))
            return super().update(n)
    return Reporting


def cached(repo: str, file: str) -> Path | None:
    """The cached copy of a hub file, without any network access; None if absent."""
    from huggingface_hub import try_to_load_from_cache
    path = try_to_load_from_cache(repo, file, cache_dir=cache_dir())
    return Path(path) if isinstance(path, str) else None


def download(repo: str, file: str, progress: Progress | None = None) -> Path:
    """One file of a hub repository, from the cache when it is there, else downloaded into it."""
    from huggingface_hub import hf_hub_download
    return Path(hf_hub_download(repo, file, cache_dir=cache_dir(), tqdm_class=_bar(progress, file)))


def snapshot(repo: str, patterns: list[str], progress: Progress | None = None) -> Path:
    """The files of a hub repository matching patterns, as one folder in the cache."""
    from huggingface_hub import snapshot_download
    return Path(snapshot_download(repo, allow_patterns=patterns, cache_dir=cache_dir(),
                                  tqdm_class=_bar(progress, repo)))
