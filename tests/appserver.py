"""Launch the explorer in-process on a free local port, for the API and browser tests."""
import contextlib
import socket

import torch

from app.ui import LAUNCH, QUEUE, build_demo


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_app():
    """Yield the URL of a running app; one torch thread while it runs (see test_app_render.one_thread)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    demo = build_demo().queue(**QUEUE)
    _, url, _ = demo.launch(server_name="127.0.0.1", server_port=free_port(), prevent_thread_lock=True,
                            quiet=True, **LAUNCH)
    try:
        yield url
    finally:
        demo.close()
        torch.set_num_threads(before)
