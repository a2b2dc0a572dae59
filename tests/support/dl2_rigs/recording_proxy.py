"""A TCP proxy that records the HTTP request heads passing through it (tests: what does a Mesos
master actually receive from the framework, e.g. its ``Authorization`` header)."""

from __future__ import annotations

import logging
import socket
import threading

logger = logging.getLogger(__name__)
_METHODS = ("GET", "POST", "PUT", "DELETE", "HEAD")


class RecordingProxy:
    """Forwards ``127.0.0.1:<port>`` to ``target`` (``host:port``) byte for byte, both ways, and
    keeps the head (request line + headers) of every HTTP request a client sends."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.heads: list[str] = []
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name="recording-proxy", daemon=True)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> RecordingProxy:
        self._thread.start()
        return self

    def close(self) -> None:
        self._closed = True
        self._listener.close()

    def headers_named(self, name: str) -> list[str]:
        """Values of header ``name`` (case-insensitive) over every recorded request."""
        out = []
        for head in list(self.heads):
            for line in head.split("\r\n")[1:]:
                k, _, v = line.partition(":")
                if k.strip().lower() == name.lower():
                    out.append(v.strip())
        return out

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, record: bool) -> None:
        buf = b""
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if record:
                    buf += data
                    # keep every complete head seen on this connection; bodies are skipped roughly
                    while b"\r\n\r\n" in buf:
                        head, _, buf = buf.partition(b"\r\n\r\n")
                        text = head.decode("latin-1")
                        # a previous request's body may precede this head on a kept-alive connection
                        starts = [i for i in (text.find(m + " /") for m in _METHODS) if i >= 0]
                        if starts:
                            with self._lock:
                                self.heads.append(text[min(starts):])
                    buf = buf[-65536:]
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
