"""TCP proxies the test controls, between a beat and Postgres or the broker.

``Proxy`` cuts like a network partition: ``cut()`` stops relaying in both
directions but keeps every socket open, as a partition does: the server sees an
idle client, the client waits for replies that never come. ``heal()`` resets the
held connections and relays again. ``Throttle`` relays the client's bytes at a
set rate: a server that keeps taking them and answering, slowly.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading


class Proxy:
    """Listens on 127.0.0.1:<port> and relays to ``target``; see the module docstring."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.cutting = threading.Event()
        self.stopping = threading.Event()
        self.pairs: list[tuple[socket.socket, socket.socket]] = []
        self.held: list[socket.socket] = []  # connection attempts during a cut, never answered
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        self.listener.settimeout(0.2)
        while not self.stopping.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                continue
            if self.cutting.is_set():
                self.held.append(client)  # a partition: the attempt goes nowhere (held open, never answered)
                continue
            try:
                server = socket.create_connection(self.target, timeout=3)
                server.settimeout(None)
            except OSError:  # the target is down: the client sees its connection refused
                with contextlib.suppress(OSError):
                    client.close()
                continue
            with self.lock:
                self.pairs.append((client, server))
            threading.Thread(target=self._relay, args=(client, server), daemon=True).start()

    def _relay(self, a: socket.socket, b: socket.socket) -> None:
        peers = {a: b, b: a}
        while not self.stopping.is_set():
            if self.cutting.is_set():
                self.stopping.wait(0.05)
                continue
            try:
                ready, _, _ = select.select([a, b], [], [], 0.1)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        raise OSError("closed")
                    peers[sock].sendall(data)
            except (OSError, ValueError):
                break
        for sock in (a, b):
            with contextlib.suppress(OSError):
                sock.close()

    def cut(self) -> None:
        """Stop relaying; keep the sockets open."""
        self.cutting.set()

    def heal(self) -> None:
        """Reset the held connections (as a client's TCP timeout would end them) and relay new ones."""
        with self.lock:
            pairs, self.pairs = self.pairs, []
            pairs += [(s,) for s in self.held]
            self.held = []
        for pair in pairs:
            for sock in pair:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    sock.close()
        self.cutting.clear()

    def close(self) -> None:
        self.stopping.set()
        self.heal()
        self.listener.close()


class Throttle:
    """Listens on 127.0.0.1:<port> and relays to ``target``, the client's bytes at most ``rate`` per second (the
    server's replies at once): a broker that keeps taking messages and confirming them, slowly."""

    def __init__(self, target: tuple[str, int], rate: int) -> None:
        self.target, self.rate = target, rate
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            server = socket.create_connection(self.target)
            self.sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, self.rate // 10), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, 0), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket, per_tenth: int) -> None:
        """Relay one direction; with ``per_tenth``, at most that many bytes each tenth of a second."""
        try:
            while data := source.recv(per_tenth or 1 << 20):
                sink.sendall(data)
                if per_tenth:
                    threading.Event().wait(0.1)
        except OSError:
            pass
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.close()

    def close(self) -> None:
        self.listener.close()
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.close()
