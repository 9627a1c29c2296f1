"""A small model server for the serving class: the classifier examples/train_ddp.py trains, behind
HTTP, with its queue depth exported for the autoscaler.

- POST /v1/classify  {"inputs": [[784 floats], ...]}  ->  {"classes": [...]}
- GET  /healthz      200 once the model is loaded (the readiness probe)
- GET  /metrics      Prometheus text: higgsfield_serving_requests_waiting (queued + running
                     requests, what the HPA scales on) and higgsfield_serving_requests_total

Requests wait in one queue; one thread takes up to MAX_BATCH of them at a time and runs them on
the GPU. The weights come from the newest complete checkpoint under MODEL_DIR (a training job's
CHECKPOINT_SHARED_DIR, read with torch.distributed.checkpoint), or are random when there is none
(said on start). Stdlib HTTP, so the training image runs it as is; the queue and the metrics need
no torch (tests/offline/test_workload_examples.py runs them with a stand-in model).
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

WAITING = "higgsfield_serving_requests_waiting"
TOTAL = "higgsfield_serving_requests_total"


class Batcher:
    """Requests in, answers out, at most `max_batch` rows per call of `model`."""

    def __init__(self, model: Callable[[list], list], max_batch: int = 64) -> None:
        self.model, self.max_batch = model, max_batch
        self.queue: queue.Queue = queue.Queue()
        self.lock = threading.Lock()
        self.waiting = 0  # queued or running
        self.total = 0

    def submit(self, rows: list) -> list:
        done, box = threading.Event(), {}
        with self.lock:
            self.waiting += 1
            self.total += 1
        self.queue.put((rows, box, done))
        done.wait()
        with self.lock:
            self.waiting -= 1
        if "error" in box:
            raise box["error"]
        return box["answer"]

    def run_once(self, block: bool = True) -> int:
        """Take what is queued (up to max_batch rows), run it, answer each request. Returns the rows run."""
        try:
            first = self.queue.get(block=block)
        except queue.Empty:
            return 0
        batch, rows = [first], len(first[0])
        while rows < self.max_batch:
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                break
            batch.append(item)
            rows += len(item[0])
        try:
            answers = self.model([r for item in batch for r in item[0]])
            at = 0
            for item_rows, box, _ in batch:
                box["answer"], at = answers[at : at + len(item_rows)], at + len(item_rows)
        except Exception as exc:  # every waiting request hears of it
            for _, box, _ in batch:
                box["error"] = exc
        for _, _, done in batch:
            done.set()
        return rows

    def metrics(self) -> str:
        with self.lock:
            waiting, total = self.waiting, self.total
        return (
            f"# HELP {WAITING} Requests queued or running.\n# TYPE {WAITING} gauge\n{WAITING} {waiting}\n"
            f"# HELP {TOTAL} Requests received.\n# TYPE {TOTAL} counter\n{TOTAL} {total}\n"
        )


def handler(batcher: Batcher, ready: threading.Event) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _send(self, code: int, body: str, kind: str = "application/json") -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path == "/metrics":
                self._send(200, batcher.metrics(), "text/plain; version=0.0.4")
            elif self.path == "/healthz":
                self._send(200 if ready.is_set() else 503, json.dumps({"ready": ready.is_set()}))
            else:
                self._send(404, json.dumps({"error": "not found"}))

        def do_POST(self) -> None:  # noqa: N802
            if self.path != "/v1/classify":
                return self._send(404, json.dumps({"error": "not found"}))
            try:
                rows = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))["inputs"]
                if not isinstance(rows, list) or not rows:
                    raise ValueError("inputs: a non-empty list of rows")
            except (ValueError, KeyError, TypeError) as exc:
                return self._send(400, json.dumps({"error": str(exc)}))
            try:
                self._send(200, json.dumps({"classes": batcher.submit(rows)}))
            except Exception as exc:
                self._send(500, json.dumps({"error": str(exc)}))

        def log_message(self, *args) -> None:  # one line per request is noise at serving rates
            pass

    return Handler


def load_model(model_dir: str | None) -> Callable[[list], list]:
    """The classifier of examples/train_ddp.py, with the newest complete checkpoint's weights."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch import nn

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from checkpointing import latest_complete

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 512), nn.ReLU(), nn.Linear(512, 10))
    found = latest_complete(Path(model_dir)) if model_dir else None
    if found:
        state = {"model": model.state_dict()}
        dcp.load(state, checkpoint_id=str(found[1]))  # no process group: a single reader loads every shard
        model.load_state_dict(state["model"])
        print(f"serving the weights of {found[1]} (step {found[0]})", flush=True)
    else:
        print(f"no complete checkpoint in {model_dir or '(MODEL_DIR unset)'}: serving random weights", flush=True)
    model = model.to(device).eval()

    def classify(rows: list) -> list:
        with torch.no_grad():
            return (
                model(torch.tensor(rows, dtype=torch.float32, device=device).view(-1, 1, 28, 28)).argmax(dim=1).tolist()
            )

    return classify


def main() -> int:
    ready = threading.Event()
    batcher = Batcher(lambda rows: [], int(os.environ.get("MAX_BATCH", "64")))
    server = ThreadingHTTPServer(("0.0.0.0", int(os.environ.get("PORT", "8000"))), handler(batcher, ready))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    batcher.model = load_model(os.environ.get("MODEL_DIR"))
    ready.set()
    while True:
        batcher.run_once()


if __name__ == "__main__":
    sys.exit(main())
