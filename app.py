"""Launch the MuLo-SD Explorer (http://127.0.0.1:7860 by default; Gradio's GRADIO_SERVER_NAME and
GRADIO_SERVER_PORT override host and port, as Hugging Face Spaces do)."""
from app.theme import CSS, THEME
from app.ui import build_demo

if __name__ == "__main__":
    build_demo().queue(default_concurrency_limit=4, max_size=32).launch(theme=THEME, css=CSS)
