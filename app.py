"""Launch the MuLo-SD Explorer (http://127.0.0.1:7860 by default; Gradio's GRADIO_SERVER_NAME and
GRADIO_SERVER_PORT override host and port, as Hugging Face Spaces do). Gradio's cache goes to a
folder of this app's own (GRADIO_TEMP_DIR overrides it), which app.files sweeps on a schedule."""
import os
import tempfile

os.environ.setdefault("GRADIO_TEMP_DIR", os.path.join(tempfile.gettempdir(), f"mulo-explorer-{os.getuid()}"))

from app.ui import LAUNCH, QUEUE, build_demo  # noqa: E402  (Gradio reads GRADIO_TEMP_DIR on import)

if __name__ == "__main__":
    build_demo().queue(**QUEUE).launch(**LAUNCH)
