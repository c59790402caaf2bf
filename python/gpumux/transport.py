"""Where the node coordinator is, and one JSON request to it (HTTP/1.1 over TCP or a unix socket).

Standard library only. Used by the session's background thread; nothing here is on a training
step's path. Not thread-safe per Endpoint instance beyond what is stated: each request opens its
own connection (the coordinator closes a connection after one request), so concurrent calls on
one Endpoint are safe.
"""
import http.client
import json
import os
import socket

DEFAULT_SOCKET = "/run/gpumux/coordinator.sock"
DEFAULT_ADDRESS = "http://127.0.0.1:9403"


class UnixHTTPConnection(http.client.HTTPConnection):
    """http.client over a unix stream socket (the coordinator's --socket)."""

    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.unix_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


def parse_url(url):
    """("unix", path) for unix:///PATH, ("tcp", (host, port)) for http://HOST[:PORT][/].

    Raises ValueError naming the variable's accepted forms for anything else.
    """
    if url.startswith("unix://"):
        path = url[len("unix://"):]
        if path.startswith("/"):
            return "unix", path
    elif url.startswith("http://"):
        hostport = url[len("http://"):].rstrip("/")
        if "/" not in hostport and hostport:
            if hostport.startswith("["):  # [v6]:port
                host, _, rest = hostport[1:].partition("]")
                port = rest[1:] if rest.startswith(":") else ""
            elif hostport.count(":") == 1:
                host, _, port = hostport.partition(":")
            else:
                host, port = hostport, ""
            if host and (port == "" or (port.isdigit() and 0 < int(port) < 65536)):
                return "tcp", (host, int(port) if port else 9403)
    raise ValueError("GPUMUX_COORDINATOR must be unix:///PATH or http://HOST:PORT, not %r" % url)


class Endpoint:
    """The coordinator's address: a configured URL, or (url=None) the defaults, looked up again
    on every request (the default socket when it exists, else the default address), so that a
    coordinator started after the job is found."""

    def __init__(self, url=None, timeout_s=2.0):
        self.configured = url is not None
        self._fixed = parse_url(url) if url is not None else None
        self.timeout_s = timeout_s

    def where(self):
        if self._fixed is not None:
            return self._fixed
        if os.path.exists(DEFAULT_SOCKET):
            return "unix", DEFAULT_SOCKET
        return parse_url(DEFAULT_ADDRESS)

    def describe(self):
        kind, where = self.where()
        if kind == "unix":
            return "unix://" + where
        host = "[%s]" % where[0] if ":" in where[0] else where[0]
        return "http://%s:%d" % (host, where[1])

    def post(self, path, body):
        """POSTs body (a JSON-serialisable object); returns (status, reply), reply being the
        JSON object answered, or None when the body is not a JSON object (a malformed reply).

        Raises OSError / http.client.HTTPException when the coordinator cannot be reached or
        the exchange breaks. Waits at most about timeout_s per socket operation.
        """
        kind, where = self.where()
        if kind == "unix":
            conn = UnixHTTPConnection(where, self.timeout_s)
        else:
            conn = http.client.HTTPConnection(where[0], where[1], timeout=self.timeout_s)
        data = json.dumps(body, separators=(",", ":")).encode()
        try:
            conn.request("POST", path, data, {"Content-Type": "application/json",
                                              "Connection": "close"})
            resp = conn.getresponse()
            raw = resp.read()
        finally:
            conn.close()
        try:
            reply = json.loads(raw.decode("utf-8"))
        except ValueError:
            return resp.status, None
        return resp.status, reply if isinstance(reply, dict) else None
