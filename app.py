"""Launch the MuLo-SD Explorer (http://127.0.0.1:7860 by default; Gradio's GRADIO_SERVER_NAME and
GRADIO_SERVER_PORT override host and port, as Hugging Face Spaces do). Gradio's cache goes to a
folder of this app's own (GRADIO_TEMP_DIR overrides it), which app.files sweeps on a schedule."""
import ctypes
import os
import tempfile

os.environ.setdefault("GRADIO_TEMP_DIR", os.path.join(tempfile.gettempdir(), f"mulo-explorer-{os.getuid()}"))

from app.ui import LAUNCH, QUEUE, build_demo  # noqa: E402  (Gradio reads GRADIO_TEMP_DIR on import)

M_MMAP_THRESHOLD = -3   # mallopt's parameter number (glibc)


def return_freed_memory(threshold: int = 4 * 2 ** 20) -> bool:
    """Make glibc give blocks over `threshold` bytes back to the system when they are freed. By default
    its threshold rises to the largest block freed (up to 32 MiB), so after an upload of 24 MiB was read
    every later block that size stays in the heap: each thread that read one kept ~25 MB more (four
    replays of a refused file: +90 MB an hour later). False where there is no glibc."""
    try:
        return bool(ctypes.CDLL("libc.so.6").mallopt(M_MMAP_THRESHOLD, threshold))
    except (OSError, AttributeError):
        return False


def warm_shipped() -> None:
    """The shipped runs of the presets and the Lesson measured before the first click (app.shipped), on a
    thread of its own while the server starts; one log line when done."""
    import logging
    import time

    from app import generation, lesson
    t0 = time.perf_counter()
    runs, steps = generation.warm_shipped(), lesson.warm_shipped()
    logging.getLogger("mulo").warning("shipped runs warmed: %d Generate runs and %d Lesson steps in %.1f s",
                                      runs, steps, time.perf_counter() - t0)


if __name__ == "__main__":
    import threading
    return_freed_memory()
    threading.Thread(target=warm_shipped, name="warm-shipped", daemon=True).start()
    build_demo().queue(**QUEUE).launch(**LAUNCH)
