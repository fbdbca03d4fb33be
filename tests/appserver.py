"""Launch the explorer in-process on a free local port, for the API and browser tests."""
import contextlib
import json
import socket
import uuid

import httpx
import torch

from app.ui import LAUNCH, QUEUE, build_demo


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


RUNNING: dict = {}   # url -> the Blocks served there, for tests that look at what a session keeps


@contextlib.contextmanager
def running_app():
    """Yield the URL of a running app; one torch thread while it runs (see test_app_render.one_thread)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    demo = build_demo().queue(**QUEUE)
    _, url, _ = demo.launch(server_name="127.0.0.1", server_port=free_port(), prevent_thread_lock=True,
                            quiet=True, **LAUNCH)
    RUNNING[url] = demo
    try:
        yield url
    finally:
        RUNNING.pop(url, None)
        demo.close()
        torch.set_num_threads(before)


def call(url: str, api_name: str, data: list, session_hash: str | None = None, event_data=None,
         timeout: float = 120) -> dict:
    """Call any event of the app over plain HTTP, as a browser does (private events included, which
    gradio_client refuses): join the queue by fn_index, read the event stream to its end. Returns
    the process_completed message ({"success": ..., "output": {"data" | "error": ...}})."""
    deps = httpx.get(url + "config", timeout=timeout).json()["dependencies"]
    fn_index = next(i for i, d in enumerate(deps) if d.get("api_name") == api_name)
    session_hash = session_hash or uuid.uuid4().hex[:11]
    with httpx.Client(timeout=timeout) as http:
        body = dict(data=data, fn_index=fn_index, trigger_id=None, session_hash=session_hash, event_data=event_data)
        joined = http.post(url + "gradio_api/queue/join", content=json.dumps(body),   # NaN and Infinity as sent
                           headers={"content-type": "application/json"})
        joined.raise_for_status()
        with http.stream("GET", url + "gradio_api/queue/data", params=dict(session_hash=session_hash)) as stream:
            for line in stream.iter_lines():
                if line.startswith("data:"):
                    msg = json.loads(line[5:])
                    if msg.get("msg") == "process_completed":
                        return msg
    raise RuntimeError(f"{api_name}: the event stream ended without a result")
