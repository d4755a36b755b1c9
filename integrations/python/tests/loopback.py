"""A JSON-over-HTTP server on 127.0.0.1 for the tests' scripted endpoints (policies, inference servers)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: (path, request headers lower-cased, JSON body) -> (status, JSON answer)
Answer = Callable[[str, dict[str, str], Any], tuple[int, Any]]


class JSONServer:
    """Answers every POST with `answer(path, headers, body)`; `url` is its root."""

    def __init__(self, answer: Answer):
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                status, reply = answer(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
