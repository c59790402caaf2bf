"""gpumux task SDK: lets a training loop report its step times to the node coordinator and
learn the batch size it should use (docs/COORDINATOR.md).

    import gpumux
    session = gpumux.Session(job_class="resnet", batch_size=64)
    batch = session.batch_size
    for step in range(steps):
        with session.step():
            train_one_minibatch(batch)
        if session.batch_size != batch:      # adopt at a boundary of the job's choosing
            batch = session.batch_size
    session.close()

The training thread never waits on the network: step() only appends (batch size, seconds) to a
list; a daemon thread registers, sends the steps every `report_every_s` and reads the batch
size the coordinator wants. Without a reachable coordinator every call is a cheap no-op and
`batch_size` stays what the job set. Only Python's standard library is used.

Environment:
  GPUMUX_COORDINATOR   unix:///run/gpumux/coordinator.sock or http://127.0.0.1:9403
                       (default: that socket when it exists, else that address)
  GPUMUX_DISABLE=1     do nothing at all
  GPUMUX_POD, GPUMUX_CONTAINER   the job's id "namespace/pod/container" (set by the device
                       plugin); without them "host/<hostname>/<pid>"
  GPUMUX_GPU_UUIDS     the GPUs the job runs on (set by the device plugin and the runtime hook);
                       else NVIDIA_VISIBLE_DEVICES when it lists UUIDs
  GPUMUX_GPU_MEM_MIB   the job's GPU memory grant, which bounds the batch sizes it is offered
"""
import atexit
import http.client
import json
import logging
import os
import socket
import threading
import time

__all__ = ["Session", "DEFAULT_SOCKET", "DEFAULT_ADDRESS"]

DEFAULT_SOCKET = "/run/gpumux/coordinator.sock"
DEFAULT_ADDRESS = "http://127.0.0.1:9403"
_MAX_STEPS_PER_REPORT = 10000
_log = logging.getLogger("gpumux")


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


def _endpoint():
    """(kind, where): ("unix", path) or ("tcp", (host, port))."""
    url = os.environ.get("GPUMUX_COORDINATOR", "")
    if not url:
        url = "unix://" + DEFAULT_SOCKET if os.path.exists(DEFAULT_SOCKET) else DEFAULT_ADDRESS
    if url.startswith("unix://"):
        return "unix", url[len("unix://"):]
    if url.startswith("http://"):
        hostport = url[len("http://"):].rstrip("/")
        host, _, port = hostport.rpartition(":")
        return "tcp", (host or "127.0.0.1", int(port or 9403))
    raise ValueError("GPUMUX_COORDINATOR must be unix:///PATH or http://HOST:PORT, not %r" % url)


def _default_job_id():
    pod, container = os.environ.get("GPUMUX_POD", ""), os.environ.get("GPUMUX_CONTAINER", "")
    if pod and container:
        return pod + "/" + container
    return "host/%s/%d" % (socket.gethostname(), os.getpid())


def _default_gpus():
    uuids = os.environ.get("GPUMUX_GPU_UUIDS", "")
    if not uuids:
        visible = os.environ.get("NVIDIA_VISIBLE_DEVICES", "")
        if visible.startswith("GPU-") or visible.startswith("MIG-"):
            uuids = visible
    return [u for u in uuids.split(",") if u]


class _Step:
    __slots__ = ("_session", "_start")

    def __init__(self, session):
        self._session = session

    def __enter__(self):
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        s = self._session
        s._record(s._running_batch, time.perf_counter() - self._start)
        return False


class Session:
    """One training job's connection to the node coordinator. Thread-safe."""

    def __init__(self, job_class, batch_size, *, job_id=None, gpus=None, min_batch=0,
                 max_batch=0, noise_scale=0.0, timeout_s=2.0, enabled=None):
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        self.job_class = job_class
        self.job_id = job_id or _default_job_id()
        self.gpus = list(gpus) if gpus is not None else _default_gpus()
        self.min_batch, self.max_batch = int(min_batch), int(max_batch)
        self.noise_scale = float(noise_scale)
        self.timeout_s = timeout_s
        self.report_every_s = 1.0
        self.state = "unregistered"
        self.last_error = None
        self._batch = int(batch_size)          # what the coordinator wants
        self._running_batch = int(batch_size)  # what the job runs now
        self._steps = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = False
        self._registered = False
        self._backoff = 0.0
        self._warned = False
        if enabled is None:
            enabled = os.environ.get("GPUMUX_DISABLE", "") not in ("1", "true", "yes")
        self.enabled = bool(enabled)
        self._thread = None
        if self.enabled:
            try:
                self._where = _endpoint()
            except ValueError as e:
                _log.warning("gpumux: %s; running without the coordinator", e)
                self.enabled = False
        if self.enabled:
            self._thread = threading.Thread(target=self._run, name="gpumux-sdk", daemon=True)
            self._thread.start()
            atexit.register(self.close)

    # ---- the training thread's side: no network, no waiting
    @property
    def batch_size(self):
        """The batch size the coordinator wants (the job's own until it says otherwise)."""
        return self._batch

    def step(self):
        """Context manager timing one training step at the batch size the job runs now."""
        return _Step(self)

    def set_running_batch(self, batch_size):
        """Tells the SDK the batch size the job runs from now on (after adopting one)."""
        self._running_batch = int(batch_size)

    def record(self, seconds, batch_size=None):
        """Records one step measured by the job itself."""
        self._record(self._running_batch if batch_size is None else int(batch_size), seconds)

    def _record(self, batch, seconds):
        if not self.enabled:
            return
        with self._lock:
            if len(self._steps) < _MAX_STEPS_PER_REPORT:
                self._steps.append((batch, seconds))

    # ---- the background thread's side
    def _connection(self):
        kind, where = self._where
        if kind == "unix":
            return _UnixConnection(where, self.timeout_s)
        return http.client.HTTPConnection(where[0], where[1], timeout=self.timeout_s)

    def _post(self, path, body):
        conn = self._connection()
        try:
            conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        try:
            reply = json.loads(data.decode() or "{}")
        except ValueError:
            reply = {}
        if not isinstance(reply, dict):
            reply = {}
        return resp.status, reply

    def _adopt(self, reply):
        b = reply.get("batch_size")
        if isinstance(b, int) and not isinstance(b, bool) and b >= 1:
            self._batch = b
        state = reply.get("state")
        if isinstance(state, str):
            self.state = state
        every = reply.get("report_every_s")
        if isinstance(every, (int, float)) and not isinstance(every, bool) and 0.01 <= every <= 600:
            self.report_every_s = float(every)

    def _register(self):
        body = {"job": self.job_id, "class": self.job_class, "batch_size": self._running_batch,
                "gpus": self.gpus, "pid": os.getpid()}
        if self.min_batch:
            body["min_batch"] = self.min_batch
        if self.max_batch:
            body["max_batch"] = self.max_batch
        if self.noise_scale:
            body["noise_scale"] = self.noise_scale
        mem = os.environ.get("GPUMUX_GPU_MEM_MIB", "")
        if mem.isdigit() and int(mem) > 0:
            body["memory_mib"] = int(mem)
        status, reply = self._post("/v1/register", body)
        if status != 200:
            raise _Refused(status, reply.get("error", ""))
        self._registered = True
        self._adopt(reply)

    def _report(self):
        with self._lock:
            steps, self._steps = self._steps, []
        body = {"job": self.job_id, "steps": [[b, round(s, 9)] for b, s in steps]}
        try:
            status, reply = self._post("/v1/report", body)
        except OSError:
            with self._lock:  # keep them for the next attempt
                self._steps[:0] = steps[: _MAX_STEPS_PER_REPORT - len(self._steps)]
            raise
        if status == 404:
            self._registered = False  # the coordinator forgot us (restarted): register again
            with self._lock:
                self._steps[:0] = steps[: _MAX_STEPS_PER_REPORT - len(self._steps)]
            return
        if status != 200:
            raise _Refused(status, reply.get("error", ""))
        self._adopt(reply)

    def _once(self):
        if not self._registered:
            self._register()
        self._report()

    def _run(self):
        while True:
            self._wake.wait(max(self.report_every_s, self._backoff))
            self._wake.clear()
            if self._stop:
                return
            try:
                self._once()
                self._backoff = 0.0
                self.last_error = None
                if self._warned:
                    _log.warning("gpumux: coordinator reachable again")
                    self._warned = False
            except (OSError, http.client.HTTPException, _Refused) as e:
                self.last_error = str(e)
                self._backoff = min(30.0, max(1.0, self._backoff * 2))
                if not self._warned:
                    _log.warning("gpumux: no coordinator at %s (%s); training goes on, retrying",
                                 self._where[1], e)
                    self._warned = True

    def close(self):
        """Sends the last steps and leaves. Safe to call twice; atexit calls it."""
        if not self.enabled or self._stop:
            return
        self._stop = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s)
        if self._registered:
            try:
                self._report()
                self._post("/v1/leave", {"job": self.job_id})
            except (OSError, http.client.HTTPException, _Refused):
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class _Refused(Exception):
    def __init__(self, status, message):
        super().__init__("HTTP %d: %s" % (status, message))
        self.status = status
