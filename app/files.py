"""Where the app's files go, and how long they stay.

Images and trace downloads are written into Gradio's cache folder under content-addressed names,
through a temporary name and a rename: a file that a client is downloading is never rewritten in
place (identical runs produce identical names), and Gradio serves it as it already is. A sweeper
removes every file of that folder older than CACHE_AGE_S, and the uploads no event claimed (app.uploads)
after UPLOAD_AGE_S, so the disk a host uses stays bounded however long it runs. Knows nothing of models.
"""
from __future__ import annotations

import asyncio
import hashlib
import io
import os
import tempfile
import time
from contextlib import asynccontextmanager
from pathlib import Path

import numpy as np
from gradio.utils import get_upload_folder
from PIL import Image

CACHE_AGE_S = int(os.environ.get("MULO_CACHE_AGE_S", "900"))   # a file is kept this long after its last use
UPLOAD_AGE_S = int(os.environ.get("MULO_UPLOAD_AGE_S", "120"))  # an upload no event claimed is kept this long


def cache_folder() -> Path:
    """Gradio's cache and upload folder (GRADIO_TEMP_DIR); app.py gives the app one of its own."""
    return Path(get_upload_folder())


def _store(data: bytes, name: str) -> str:
    """data under <cache>/mulo/<sha256>/<name>, written once and atomically; a reused file is
    touched so that the sweeper counts its age from now."""
    folder = cache_folder() / "mulo" / hashlib.sha256(data).hexdigest()[:32]
    path = folder / name
    try:
        os.utime(path)
        return str(path)
    except FileNotFoundError:     # not there, or swept since it was looked at: write it
        pass
    for attempt in range(3):      # the sweeper removes an empty folder between mkdir and mkstemp
        folder.mkdir(parents=True, exist_ok=True)
        try:
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.")
            break
        except FileNotFoundError:
            if attempt == 2:
                raise
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return str(path)


def png(img: np.ndarray) -> str:
    """(h, w, 3) uint8 -> path of its PNG in the cache."""
    buf = io.BytesIO()
    Image.fromarray(np.asarray(img, dtype=np.uint8)).save(buf, format="png")
    return _store(buf.getvalue(), "image.png")


def trace_file(trace) -> str:
    """Path of a trace's JSON in the cache, named by method and seed."""
    return _store(trace.to_json().encode(), f"trace-{trace.method}-seed{trace.seed}.json")


def sweep(root: Path, age_s: float, now: float | None = None) -> int:
    """Remove files under root last written or touched more than age_s ago, then empty folders;
    returns how many files went."""
    now = time.time() if now is None else now
    gone = 0
    for folder, dirs, names in os.walk(root, topdown=False):
        for name in names:
            path = os.path.join(folder, name)
            try:
                st = os.lstat(path)
                if now - max(st.st_mtime, st.st_ctime) > age_s:
                    os.remove(path)
                    gone += 1
            except FileNotFoundError:
                continue
        if folder != str(root):
            try:
                os.rmdir(folder)          # only succeeds when empty
            except OSError:
                pass
    return gone


def sweep_unclaimed(root: Path, now: float | None = None) -> int:
    """Remove the route's uploads (every file of the cache folder outside the app's own) older than
    UPLOAD_AGE_S; returns how many went."""
    now = time.time() if now is None else now
    gone = 0
    for entry in os.scandir(root):
        if entry.name != "mulo" and entry.is_dir(follow_symlinks=False):
            gone += sweep(Path(entry.path), UPLOAD_AGE_S, now)
            try:
                os.rmdir(entry.path)
            except OSError:
                pass
    return gone


def forget_swept(blocks) -> int:
    """Drop from Gradio's lists of the files it made or received (blocks.temp_file_sets) those already
    swept: Gradio drops only what it deletes itself, so each swept file's name would stay for the life
    of the process. Returns how many names went."""
    gone = 0
    for names in getattr(blocks, "temp_file_sets", ()):
        missing = {n for n in list(names) if not os.path.exists(n)}
        names -= missing
        gone += len(missing)
    return gone


@asynccontextmanager
async def sweeping(app):
    """A FastAPI lifespan: sweep every CACHE_AGE_S / 4 seconds (at most a minute, at most UPLOAD_AGE_S / 4)
    the whole cache folder when GRADIO_TEMP_DIR names one for this app, its unclaimed uploads sooner;
    else (Gradio's shared default) only the app's own files."""
    own = bool(os.environ.get("GRADIO_TEMP_DIR"))
    root = cache_folder() if own else cache_folder() / "mulo"

    async def loop():
        while True:
            await asyncio.sleep(min(60.0, CACHE_AGE_S / 4, UPLOAD_AGE_S / 4))
            await asyncio.to_thread(sweep, root, CACHE_AGE_S)
            if own:
                await asyncio.to_thread(sweep_unclaimed, root)
            forget_swept(app.get_blocks() if hasattr(app, "get_blocks") else None)
    task = asyncio.create_task(loop())
    try:
        yield
    finally:
        task.cancel()
